package image

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"pybox/host/jail"
)

// inJail runs a program of the tree in a build jail (jail.Build): the
// tree its root, read-only but for j's writable binds, as buildUser, in
// namespaces of its own. Its output goes to the log as inTree's does;
// when ctx ends its process group is stopped.
func (bd *build) inJail(ctx context.Context, j jailRun, path string, args ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	helper, helperEnv := bd.b.jailHelper()
	c := &jail.Cmd{
		Spec: &jail.Spec{Mode: jail.Build, Program: path, Args: args, Env: j.env, Root: bd.tree, Binds: j.binds,
			Network: j.network, User: buildUser},
		Helper: helper, HelperEnv: helperEnv, Stdout: pw, Stderr: pw,
	}
	net := "no network"
	if j.network {
		net = "network"
	}
	fmt.Fprintf(bd.log, "\n$ (jail: uid %d, %s, writable %s) %s %s\n", buildUser, net, writableList(j.binds), path, strings.Join(redactArgs(args), " "))
	started, waited := make(chan error, 1), make(chan error, 1)
	go func() {
		// The program's parent-death signal is tied to the thread
		// that starts it: that thread stays until the program ends.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- c.Wait()
	}()
	err = <-started
	pw.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	done := make(chan struct{})
	go stopOnCancel(ctx, c.Process().Pid, done)
	tail := copyLines(pr, bd.log, j.onLine)
	err = <-waited
	close(done)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return &exitError{cmd: path, err: err, tail: tail}
	}
	return nil
}
