// Package box runs programs, each in a fresh sealed box, and writes their
// receipts. Several run at once, one box each; where to read what:
//
//   - admit.go: admission, the one place that decides whether a run may
//     start, by the memory its bound needs beside the runs in progress;
//   - run.go: the life of one run, from its box's making to its receipt;
//   - pool.go and handover.go: the warm boxes made ahead of their runs,
//     and how a run takes one; imports.go, what a program imports;
//   - aside.go: what a failed cleanup left, kept out of use;
//   - netns.go: the proxy in the box of a run that opens the network,
//     whose connections the agent carries to the host;
//   - box.go: the Runner that holds them together.
//
// The parent side ([Runner.Run], in the agent, real root in the guest) makes
// the run's cgroup and a staging tmpfs for its /tmp, starts the box's
// first process, bounds and measures it, kills whatever is left, collects
// /tmp/output, removes the box and checks that it is gone.
//
// The box's first process is this same binary started again as
// "box-init" ([ChildMain]): Go cannot run code between fork and exec, so
// the namespaces come from clone flags and everything else (mounts, the
// root switch, dropping to an unprivileged uid, seccomp) happens in
// box-init, which then checks its own posture and execs python3.
//
// The two sides talk over two pipes: box-init reads its configuration as
// JSON from fd 3, and writes JSON lines to fd 4 (close-on-exec): its
// posture just before exec, or the step that failed. End of file after a
// good posture means python3 is running.
//
// What a receipt means:
//   - The wall timeout counts from the program's start (the posture
//     report), not from the box's setup; wall_ms is measured the same way.
//   - Output that is not valid UTF-8 keeps one U+FFFD per invalid run of
//     bytes and sets invalid_utf8; a character cut in two by
//     max_output_bytes is dropped whole. Byte counts are of the raw bytes.
//   - exit_code is the program's code, or 128+n when signal n killed it,
//     with the signal's name beside it (a timeout, cancel or OOM kill
//     shows as 137, SIGKILL, and the status says why).
//
// box-init stays the init of the box's pid namespace and python3 is its
// child (pid 2). Signals the program sends itself act as anywhere else
// (the kernel would drop them for a namespace's init); box-init reaps
// every orphan; and when the program exits, box-init reports its wait
// status and exits, and the kernel kills every other process of the box
// at once (the cgroup kill that follows finds nothing).
package box
