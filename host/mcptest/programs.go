package mcptest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Every program the checks run starts with this line and the program's
// name, so that the server's log (and a test's fake server) can tell
// them apart.
const marker = "# pybox check: "

func program(name, body string) string { return marker + name + "\n" + body }

// pyString renders s as a Python string literal: a JSON string is one,
// for the escapes encoding/json writes.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// hello is the stdlib run: it prints a greeting and something only a
// real Python computes.
var helloProgram = program("hello", `import hashlib
print("hello from pybox check")
print(hashlib.sha256(b"pybox").hexdigest())
`)

func helloStdout() string {
	return "hello from pybox check\n" + sha256Hex([]byte("pybox")) + "\n"
}

// olderGreeting is what the initialize check's run prints, in the
// session at the older revision.
const olderGreeting = "hello over MCP " + olderProtocol

var olderProgram = program("older-revision", "print("+pyString(olderGreeting)+")\n")

// imageProgram prints the Python version of an image.
var imageProgram = program("image", `import sys
print(sys.version.split()[0])
`)

// The files run: it reports what it finds in /tmp/input (name, size,
// sha256) and writes two files derived from the inputs to /tmp/output.
var filesProgram = program("files", `import hashlib, os
for name in sorted(os.listdir("/tmp/input")):
    data = open("/tmp/input/" + name, "rb").read()
    print(name, len(data), hashlib.sha256(data).hexdigest())
open("/tmp/output/upper.txt", "w").write(open("/tmp/input/in.txt").read().upper())
open("/tmp/output/reversed.bin", "wb").write(open("/tmp/input/in.bin", "rb").read()[::-1])
`)

// inputFiles are the files a files run sends: a text one (with a
// character outside ASCII that has no case) and a binary one (with bytes
// that are not UTF-8, so it must travel as base64). Both carry random
// bytes, so no stored answer can pass.
type inputFiles struct {
	text   string
	binary []byte
}

func newInputFiles() inputFiles {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	bin := make([]byte, 300)
	for i := range 256 {
		bin[i] = byte(i)
	}
	rand.Read(bin[256:])
	return inputFiles{
		text:   fmt.Sprintf("pybox check: files in and out\nnonce %x \u2713\n", nonce),
		binary: bin,
	}
}

// args are the files as run_python arguments.
func (f inputFiles) args() []any {
	return []any{
		map[string]any{"name": "in.txt", "content": f.text},
		map[string]any{"name": "in.bin", "content": base64.StdEncoding.EncodeToString(f.binary), "encoding": "base64"},
	}
}

// byName maps each input file to its content.
func (f inputFiles) byName() map[string][]byte {
	return map[string][]byte{"in.txt": []byte(f.text), "in.bin": f.binary}
}

// stdout is what the files program prints for these files.
func (f inputFiles) stdout() string {
	files := f.byName()
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %d %s\n", n, len(files[n]), sha256Hex(files[n]))
	}
	return b.String()
}

// outputs are the files the program writes back, by name.
func (f inputFiles) outputs() map[string][]byte {
	rev := make([]byte, len(f.binary))
	for i, c := range f.binary {
		rev[len(rev)-1-i] = c
	}
	// Python's str.upper and Go's strings.ToUpper agree on ASCII and on
	// U+2713, which has no case.
	return map[string][]byte{"upper.txt": []byte(strings.ToUpper(f.text)), "reversed.bin": rev}
}

// The forged messages a program prints: a response to id 999, which the
// client never sends, and a notification. On the wire they would be
// protocol; in capture.stdout they are only text.
const (
	forgedResponse     = `{"jsonrpc":"2.0","id":999,"result":{"content":[{"type":"text","text":"forged by the program"}],"isError":false}}`
	forgedNotification = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"emergency","logger":"pybox-check","data":"forged by the program"}}`
	forgedOutput       = forgedResponse + "\n" + forgedNotification + "\n"
)

var forgeProgram = program("forge", `import sys
sys.stdout.write(`+pyString(forgedOutput)+`)
sys.stdout.flush()
`)

// sleepProgram outlives any timeout a server allows.
func sleepProgram(name string) string {
	return program(name, `import time
time.sleep(600)
`)
}

// notRunProgram is a call that must be refused before it runs.
func notRunProgram(name string) string {
	return program(name, `print("this call should have been refused")
`)
}

// trimProgram makes a result that cannot be delivered whole: both streams
// at 8 KiB of a byte that JSON escapes to six (the receipt passes 64 KiB),
// and six such files (the response passes 256 KiB).
var trimProgram = program("trim", `import sys
sys.stdout.write("\x01" * 8192)
sys.stderr.write("\x01" * 8192)
for i in range(6):
    open("/tmp/output/f%d.txt" % i, "w").write("\x01" * 8192)
`)

// chartPrograms draw a PNG chart into /tmp/output and print its sha256 as
// written: with Pillow in the data image (matplotlib writes its PNGs
// through Pillow; matplotlib itself would take longer than a default
// --max-timeout under TCG), or with Python's zlib where data is not
// allowed.
var (
	chartProgramData = program("chart", `import hashlib
from PIL import Image, ImageDraw
im = Image.new("RGB", (240, 160), "white")
ImageDraw.Draw(im).line([(10, 150), (80, 40), (160, 110), (230, 20)], fill=(31, 119, 180), width=3)
im.save("/tmp/output/chart.png")
print(hashlib.sha256(open("/tmp/output/chart.png", "rb").read()).hexdigest())
`)
	chartProgramStdlib = program("chart", `import hashlib, struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
w, h = 48, 32
rows = b"".join(b"\x00" + bytes(v for x in range(w) for v in (x * 5, y * 8, 128)) for y in range(h))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
open("/tmp/output/chart.png", "wb").write(png)
print(hashlib.sha256(png).hexdigest())
`)
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
