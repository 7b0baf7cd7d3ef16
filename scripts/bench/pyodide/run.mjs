// One fresh Pyodide interpreter per call, timed from process start to the
// program's end: what a WebAssembly sandbox pays per call. Usage:
//   node run.mjs 'print(1)'
// Prints the program's stdout; the harness times the whole process.
import { loadPyodide } from "pyodide";

const code = process.argv[2] ?? "print(1)";
const py = await loadPyodide({ stdout: (s) => console.log(s) });
py.runPython(code);
