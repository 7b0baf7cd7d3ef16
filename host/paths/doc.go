// Package paths says where PyBox keeps its state on the host: $PYBOX_HOME
// (default ~/.local/share/pybox), and in it the VM's private directory
// with the supervisor's sockets, the console log and state.json.
//
// The VM directory is the access boundary for the supervisor's socket: it
// must be a real directory owned by the current user with mode 0700, or
// PyBox refuses to use it.
package paths
