package image

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// DefaultMirror is the Debian archive images come from unless the build
// names another (`pybox image build --mirror`): Debian's own redirector
// to a nearby mirror. A proxy in http_proxy reaches it too.
const DefaultMirror = "http://deb.debian.org/debian"

// archiveKeyring holds the keys the Debian archive signs its lists with.
// apt on this machine checks them, so it is this machine's keyring:
// debian-archive-keyring, which on Debian 12 already holds Debian 13's
// keys.
const archiveKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// aptSources is the deb822 sources list a build of suite uses: the suite
// with its point-release updates, and its security updates, which
// Debian serves from a separate archive beside the main one (mirror +
// "-security"). The builder writes it itself rather than use this
// machine's own list, so that a Debian 12 machine builds Debian 13
// images, and its text is part of the cache key.
func aptSources(suite, mirror string) string {
	var b strings.Builder
	entry := func(uri, suites string) {
		fmt.Fprintf(&b, "Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n", uri, suites, archiveKeyring)
	}
	entry(mirror, suite+" "+suite+"-updates")
	b.WriteString("\n")
	entry(mirror+"-security", suite+"-security")
	return b.String()
}

// CheckMirror checks a Debian archive address given on the command line:
// an http or https URL with a host and nothing a sources list would read
// otherwise (spaces, new lines, a query).
func CheckMirror(m string) error {
	u, err := url.Parse(m)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" ||
		strings.ContainsAny(m, " \t\r\n") || strings.HasSuffix(m, "/") {
		return fmt.Errorf("image: mirror %q: give the Debian archive's http(s) address without a trailing slash, such as %s", m, DefaultMirror)
	}
	return nil
}

// checkKeyring says what to install when this machine cannot check the
// archive's signatures.
func checkKeyring() error {
	if _, err := os.Stat(archiveKeyring); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s is missing: install Debian's archive keys (apt-get install debian-archive-keyring)", archiveKeyring)
	} else if err != nil {
		return err
	}
	return nil
}
