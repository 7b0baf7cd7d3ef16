package main

import (
	"strings"
	"testing"
)

func TestVMService(t *testing.T) {
	t.Setenv("PYBOX_HOME", "/srv/pybox")
	out, code := capture(t, func() int { return vmService([]string{"systemd", "--images", "stdlib,data", "--memory", "2048"}) })
	if code != exitOK || !strings.Contains(out, " vm start --foreground --images stdlib,data --memory 2048\n") ||
		!strings.Contains(out, "Environment=PYBOX_HOME=/srv/pybox\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	out, code = capture(t, func() int { return vmService([]string{"launchd"}) })
	if code != exitOK || !strings.Contains(out, "<string>--foreground</string>") || !strings.Contains(out, "Library/Logs/pybox-vm.log") {
		t.Errorf("launchd: exit %d:\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"upstart"}, exitUsage, "systemd or launchd"},
		{[]string{"systemd", "launchd"}, exitUsage, "at most one"},
		{[]string{"--images", "../x"}, exitFailure, "image name"},
		{[]string{"--memory", "100"}, exitFailure, "768–65536"},
		{[]string{"--accel", "fast"}, exitFailure, "auto, kvm or tcg"},
	} {
		out, code := capture(t, func() int { return vmService(c.args) })
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %d saying %q:\n%s", c.args, code, c.code, c.want, out)
		}
	}
}
