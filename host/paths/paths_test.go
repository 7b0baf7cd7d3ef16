package paths

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureCreatesPrivateDir(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	v := ForVM(home)
	if err := v.Ensure(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(v.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %04o, want 0700", fi.Mode().Perm())
	}
	if err := v.Ensure(); err != nil {
		t.Errorf("second Ensure: %v", err)
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dir string) error
		want  string
	}{
		{"group readable", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o750)
		}, "chmod 700"},
		{"a file", func(dir string) error { return os.WriteFile(dir, nil, 0o600) }, "not a directory"},
		{"a symlink", func(dir string) error {
			target := dir + "-target"
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			return os.Symlink(target, dir)
		}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			v := ForVM(home)
			if err := tc.setup(v.Dir); err != nil {
				t.Fatal(err)
			}
			err := v.Ensure()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Ensure = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestCheckRefusesLongSocketPath(t *testing.T) {
	home := filepath.Join(t.TempDir(), strings.Repeat("x", 100))
	err := ForVM(home).Ensure()
	if err == nil || !strings.Contains(err.Error(), "shorter path") {
		t.Fatalf("Ensure = %v, want a socket path error", err)
	}
}

func TestHomeFromEnv(t *testing.T) {
	t.Setenv(EnvHome, "rel/dir")
	h, err := Home()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(h) || !strings.HasSuffix(h, "rel/dir") {
		t.Errorf("Home = %q", h)
	}
}
