package main

import (
	"strings"
	"testing"
)

func TestImageHelpAndUsage(t *testing.T) {
	for name, c := range imageCommands {
		out, code := capture(t, func() int { return c.run([]string{"--help"}) })
		if code != exitOK || !strings.Contains(out, "usage: pybox image "+name) {
			t.Errorf("pybox image %s --help: exit %d, output %q", name, code, out)
		}
	}
	if out, code := capture(t, func() int { return imageMain([]string{"--help"}) }); code != exitOK || !strings.Contains(out, "build") {
		t.Errorf("pybox image --help: %d %q", code, out)
	}
	t.Setenv("PYBOX_HOME", t.TempDir())
	t.Setenv("PYBOX_CACHE", t.TempDir())
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"build"}, exitUsage, "one NAME"},
		{[]string{"build", "stdlib", "--apt", "python3-tabulate"}, exitUsage, "built-in image"},
		{[]string{"build", "data", "--from", "stdlib"}, exitUsage, "built-in image"},
		{[]string{"build", "../etc", "--apt", "python3-tabulate"}, exitFailure, "image name"},
		{[]string{"build", "tools", "--apt", "--yes"}, exitFailure, "apt package"},
		{[]string{"build", "tools", "--add", "/etc/hostname:/tmp/x"}, exitFailure, "mounted over"},
		{[]string{"build", "stdlib", "--suite", "sid"}, exitUsage, "use bookworm or trixie"},
		{[]string{"build", "tools", "--suite", "bullseye"}, exitUsage, "use bookworm or trixie"},
		{[]string{"build", "tools", "--mirror", "deb.debian.org/debian"}, exitUsage, "http(s) address"},
		{[]string{"inspect", "data"}, exitFailure, "pybox image build data"},
		{[]string{"rm", "nothing"}, exitFailure, "not built"},
		{[]string{"list"}, exitOK, "no images"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
	} {
		out, code := capture(t, func() int { return imageMain(c.args) })
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("pybox image %v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}
