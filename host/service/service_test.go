package service

import (
	"bytes"
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pybox/shared/needs"
)

// unitValue returns the value of key in a unit's text (its last setting).
func unitValue(unit, key string) string {
	v := ""
	for _, l := range strings.Split(unit, "\n") {
		if k, val, ok := strings.Cut(l, "="); ok && k == key {
			v = val
		}
	}
	return v
}

func TestSystemdUnit(t *testing.T) {
	s := Spec{Exe: "/opt/py box/bin/pybox", Args: []string{"--images", "stdlib,data"}, Home: "/srv/pybox 100%"}
	u, err := Systemd(s)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"Type":        "notify",
		"ExecStart":   `"/opt/py box/bin/pybox" vm start --foreground --images stdlib,data`,
		"Environment": `"PYBOX_HOME=/srv/pybox 100%%"`,
		"KillMode":    "mixed",
		"Restart":     "on-failure",
		"WantedBy":    "default.target",
	} {
		if got := unitValue(u, key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	if u2, _ := Systemd(Spec{Exe: "/usr/bin/pybox"}); unitValue(u2, "Environment") != "" || unitValue(u2, "ExecStart") != "/usr/bin/pybox vm start --foreground" {
		t.Errorf("the plain unit:\n%s", u2)
	}
	for _, bad := range []Spec{
		{Exe: "pybox"},
		{Exe: "/usr/bin/pybox", Home: "/x\nExecStartPre=/bin/evil"},
		{Exe: "/usr/bin/pybox", Args: []string{"--images", "a\nb"}},
	} {
		if _, err := Systemd(bad); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}

// systemd's own parser agrees with the unit, where systemd is installed.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		needs.Unavailable(t, "no systemd-analyze: run `make deps` (it installs systemd)")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "pybox")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	u, err := Systemd(Spec{Exe: exe, Args: []string{"--images", "stdlib"}, Home: filepath.Join(dir, "home dir")})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, SystemdUnitName)
	os.WriteFile(p, []byte(u), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s\n%s", err, out, u)
	}
}

func TestLaunchdPlist(t *testing.T) {
	s := Spec{Exe: "/Users/a&b/pybox", Args: []string{"--images", "stdlib,data"}, Home: "/Users/a&b/pybox-home", Log: "/Users/a&b/Library/Logs/pybox.log"}
	p, err := Launchd(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p[strings.Index(p, "<!--")+4:strings.Index(p, "-->")], "--") {
		t.Error("the comment holds --, which XML does not allow")
	}
	// Walk the property list: keys and the strings of each.
	dec := xml.NewDecoder(strings.NewReader(p))
	dec.Strict = true
	var texts []string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed XML: %v\n%s", err, p)
			}
			break
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	got := strings.Join(texts, "|")
	for _, want := range []string{
		"Label|pybox.vm",
		"ProgramArguments|/Users/a&b/pybox|vm|start|--foreground|--images|stdlib,data",
		"PYBOX_HOME|/Users/a&b/pybox-home",
		"StandardErrorPath|/Users/a&b/Library/Logs/pybox.log",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the plist does not hold %q: %s", want, got)
		}
	}
	if !strings.Contains(p, "<key>SuccessfulExit</key>\n\t\t<false/>") || !strings.Contains(p, "<key>RunAtLoad</key>\n\t<true/>") {
		t.Errorf("KeepAlive or RunAtLoad missing:\n%s", p)
	}
	if _, err := Launchd(Spec{Exe: "/x/pybox"}); err == nil {
		t.Error("a plist without a log was accepted")
	}
}

func TestNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
	p := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", p)
	if err := Notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := l.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Errorf("got %q %v", buf[:n], err)
	}
}
