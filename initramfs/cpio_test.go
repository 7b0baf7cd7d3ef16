package initramfs

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// readNewc parses a newc archive back into entries (test-only reader).
func readNewc(b []byte) ([]Entry, error) {
	var out []Entry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			return nil, errors.New("short header")
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			return nil, fmt.Errorf("bad magic at %d", off)
		}
		field := func(i int) uint32 {
			v, _ := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			return uint32(v)
		}
		mode, size, major, minor, nameSize := field(1), int(field(6)), field(9), field(10), int(field(11))
		nameEnd := off + 110 + nameSize
		if nameSize < 1 || nameEnd > len(b) {
			return nil, errors.New("bad name size")
		}
		name := string(b[off+110 : nameEnd-1])
		dataStart := align(nameEnd)
		if dataStart+size > len(b) {
			return nil, errors.New("short data")
		}
		if name == trailer {
			return out, nil
		}
		out = append(out, Entry{Name: name, Mode: mode, Data: b[dataStart : dataStart+size], Major: major, Minor: minor})
		off = align(dataStart + size)
	}
}

func TestReproducible(t *testing.T) {
	agent := append([]byte("\x7fELF"), bytes.Repeat([]byte("agent"), 1000)...)
	var a, b bytes.Buffer
	if err := WriteGuest(&a, agent); err != nil {
		t.Fatal(err)
	}
	// Same inputs in another order: the archive must not change.
	e := Guest(agent)
	e[0], e[len(e)-1] = e[len(e)-1], e[0]
	if err := Write(&b, e); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two builds from the same inputs differ")
	}
	if a.Len()%512 != 0 {
		t.Errorf("archive is %d bytes, not a multiple of 512", a.Len())
	}
}

func TestGuestLayout(t *testing.T) {
	agent := []byte("\x7fELF-agent")
	var buf bytes.Buffer
	if err := WriteGuest(&buf, agent); err != nil {
		t.Fatal(err)
	}
	got, err := readNewc(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, e := range got {
		byName[e.Name] = e
	}
	if e := byName["init"]; e.Mode != ModeFile|0o755 || !bytes.Equal(e.Data, agent) {
		t.Errorf("init = mode %o, %d bytes; want an executable holding the agent", e.Mode, len(e.Data))
	}
	if e := byName["dev/console"]; e.Mode&0o170000 != ModeCharDev || e.Major != 5 || e.Minor != 1 {
		t.Errorf("dev/console = mode %o %d:%d, want char 5:1", e.Mode, e.Major, e.Minor)
	}
	for _, d := range dirs {
		if byName[d].Mode&0o170000 != ModeDir {
			t.Errorf("%s is not a directory", d)
		}
	}
	if err := WriteGuest(&buf, []byte("#!/bin/sh")); err == nil {
		t.Error("WriteGuest accepted an agent that is not ELF")
	}
}

// The system's cpio must read the archive too: the kernel's unpacker and
// cpio(1) agree on newc.
func TestSystemCpioReadsIt(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Fatalf("cpio(1) not installed (try: make deps): %v", err)
	}
	var buf bytes.Buffer
	if err := WriteGuest(&buf, []byte("\x7fELF")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = &buf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	want := "dev\ndev/console\nimages\ninit\nproc\nrun\nsys\ntmp\n"
	if string(out) != want {
		t.Errorf("cpio -it listed\n%s\nwant\n%s", out, want)
	}
}

func TestBadNames(t *testing.T) {
	for _, name := range []string{"", "/init", "../x", "a/../../b", "a//b", "..", "dev/"} {
		err := Write(&bytes.Buffer{}, []Entry{{Name: name, Mode: ModeFile}})
		if !errors.Is(err, ErrBadName) {
			t.Errorf("Write(%q) = %v, want ErrBadName", name, err)
		}
	}
	if err := Write(&bytes.Buffer{}, []Entry{{Name: "a"}, {Name: "a"}}); !errors.Is(err, ErrBadName) {
		t.Errorf("duplicate names: %v, want ErrBadName", err)
	}
}

func FuzzWriteRead(f *testing.F) {
	f.Add("init", []byte("\x7fELF"), uint32(ModeFile|0o755))
	f.Add("dev/console", []byte{}, uint32(ModeCharDev|0o600))
	f.Fuzz(func(t *testing.T, name string, data []byte, mode uint32) {
		var buf bytes.Buffer
		if err := Write(&buf, []Entry{{Name: name, Mode: mode, Data: data}}); err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("Write: %v", err)
			}
			return
		}
		got, err := readNewc(buf.Bytes())
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		if len(got) != 1 || got[0].Name != name || got[0].Mode != mode || !bytes.Equal(got[0].Data, data) {
			t.Fatalf("round trip changed the entry: %+v", got)
		}
		if strings.Contains(name, "\x00") {
			t.Fatalf("a name with NUL was accepted: %q", name)
		}
	})
}
