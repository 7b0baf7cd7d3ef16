// Package service writes the files that make the VM a per-user service,
// running after every reboot without anyone typing `pybox vm start`: a
// systemd user unit on Linux and a launchd agent on macOS. Both run
// `pybox vm start --foreground`, which lives as long as the VM, and both
// restart it when it fails but not when it was stopped.
//
// Notify is the one piece of the systemd protocol the foreground start
// speaks: it says READY=1 once the guest has said hello, so `systemctl
// --user start pybox` returns when the VM can run programs.
package service
