package service

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Spec is what a service file runs.
type Spec struct {
	// Exe is pybox's absolute path.
	Exe string
	// Args are `pybox vm start` flags added after --foreground, such as
	// --images stdlib,data.
	Args []string
	// Home is $PYBOX_HOME for the service, "" for the default.
	Home string
	// Log is where launchd sends the service's output (systemd has the
	// journal).
	Log string
}

// Command is the service's command line.
func (s Spec) Command() []string {
	return append([]string{s.Exe, "vm", "start", "--foreground"}, s.Args...)
}

func (s Spec) check() error {
	if !filepath.IsAbs(s.Exe) {
		return fmt.Errorf("service: %q is not an absolute path", s.Exe)
	}
	for _, v := range append(s.Command(), s.Home, s.Log) {
		// One value per line, always: a newline would start a directive of its own.
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("service: %q holds a line break or NUL", v)
		}
	}
	return nil
}

// SystemdUnitName is the name the unit is installed under.
const SystemdUnitName = "pybox.service"

// Systemd returns a systemd user unit for s.
func Systemd(s Spec) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	var words []string
	for _, w := range s.Command() {
		words = append(words, systemdQuote(w, true))
	}
	env := ""
	if s.Home != "" {
		env = "Environment=" + systemdQuote("PYBOX_HOME="+s.Home, false) + "\n"
	}
	return fmt.Sprintf(`# PyBox's VM as a systemd user service, so it runs after every reboot.
# Written by `+"`pybox vm service systemd`"+`. Install it with:
#
#   mkdir -p ~/.config/systemd/user
#   pybox vm service systemd > ~/.config/systemd/user/%[1]s
#   systemctl --user daemon-reload
#   systemctl --user enable --now pybox
#   loginctl enable-linger "$USER"    # start at boot, before you log in
#
# systemctl --user start pybox returns once the guest answers. A VM that
# fails (QEMU dies, the guest powers off by itself) is started again after
# 10 s; one stopped with pybox vm stop or systemctl --user stop pybox stays
# stopped until the next start. After upgrading pybox or its guest files:
# systemctl --user restart pybox.

[Unit]
Description=PyBox VM: runs Python for AI agents in fresh sealed boxes

[Service]
Type=notify
ExecStart=%[2]s
%[3]s# SIGTERM goes to pybox alone, which powers the guest off cleanly; sent
# to QEMU as well, it would end the VM without that.
KillMode=mixed
# Without KVM (TCG) a boot that warms the data image takes a minute or more.
TimeoutStartSec=300
TimeoutStopSec=60
Restart=on-failure
RestartSec=10

[Install]
WantedBy=default.target
`, SystemdUnitName, strings.Join(words, " "), env), nil
}

// systemdQuote quotes a word of a unit file's value: in double quotes
// unless it is plain, with backslash escapes, "%" (a specifier) doubled,
// and in a command line "$" (a variable) doubled.
func systemdQuote(w string, command bool) string {
	w = strings.ReplaceAll(w, "%", "%%")
	if command {
		w = strings.ReplaceAll(w, "$", "$$")
	}
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,=:+-@%$") == "" {
		return w
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(w) + `"`
}

// LaunchdLabel is the launchd agent's label (and its file's name, with .plist).
const LaunchdLabel = "pybox.vm"

// Launchd returns a launchd agent (a property list) for s.
func Launchd(s Spec) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if s.Log == "" {
		return "", errors.New("service: launchd needs a log file")
	}
	var b bytes.Buffer
	esc := func(v string) string {
		var e bytes.Buffer
		xml.EscapeText(&e, []byte(v))
		return e.String()
	}
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!--
  PyBox's VM as a launchd agent, so it runs whenever you are logged in.
  Written by pybox vm service launchd. Install it with:

    pybox vm service launchd > ~/Library/LaunchAgents/%[1]s.plist
    launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/%[1]s.plist

  A VM that fails is started again (KeepAlive: not after a clean exit);
  one stopped with pybox vm stop stays stopped until the next login or
  launchctl kickstart gui/$(id -u)/%[1]s. Remove it with
  launchctl bootout gui/$(id -u)/%[1]s.
-->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>%[1]s</string>
	<key>ProgramArguments</key>
	<array>
`, LaunchdLabel)
	for _, w := range s.Command() {
		fmt.Fprintf(&b, "\t\t<string>%s</string>\n", esc(w))
	}
	b.WriteString("\t</array>\n")
	if s.Home != "" {
		fmt.Fprintf(&b, "\t<key>EnvironmentVariables</key>\n\t<dict>\n\t\t<key>PYBOX_HOME</key>\n\t\t<string>%s</string>\n\t</dict>\n", esc(s.Home))
	}
	fmt.Fprintf(&b, `	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ThrottleInterval</key>
	<integer>10</integer>
	<key>ExitTimeOut</key>
	<integer>60</integer>
	<key>StandardOutPath</key>
	<string>%[1]s</string>
	<key>StandardErrorPath</key>
	<string>%[1]s</string>
</dict>
</plist>
`, esc(s.Log))
	return b.String(), nil
}
