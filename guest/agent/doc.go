// Package agent is the guest's PID 1: it boots the VM's userland (see
// package boot), then serves the host's frames on every channel
// connection and runs each program in a fresh box, one at a time.
//
// The serving logic ([Agent], [Agent.Serve], [Agent.Command]) knows no
// device: it takes a connection and a [Runner], so it is tested on the
// host with net.Pipe and a fake runner. [Main] wires it to the real
// console, channels and box.
package agent
