package e2e

// An image file someone handed you is untrusted input: importing, booting
// and using one cannot reach a data folder it was not given, hang the
// guest, fill the disk or write to the terminal. These tests take the
// stdlib image apart (its export, then its erofs tree), plant what a
// hostile author would, pack it again as an export, and give it to pybox.

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/needs"
	"pybox/shared/wire"
)

// exportEntries reads an export's tar entries, in order.
func exportEntries(t *testing.T, path string) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var heads []*tar.Header
	bodies := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return heads, bodies
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		heads, bodies[h.Name] = append(heads, h), b
	}
}

// writeExport writes entries back as an export file, with bodies
// replaced where edit gives new ones.
func writeExport(t *testing.T, path string, heads []*tar.Header, bodies map[string][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, h := range heads {
		h.Size = int64(len(bodies[h.Name]))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(bodies[h.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// editMeta changes fields of an export's meta.json.
func editMeta(t *testing.T, bodies map[string][]byte, set map[string]any) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(bodies["meta.json"], &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	bodies["meta.json"] = b
}

// hostileImage makes an export of the stdlib image with plant applied to
// its tree, and returns its path.
func hostileImage(t *testing.T, e *vmEnv, plant func(tree string)) string {
	t.Helper()
	for _, tool := range []string{"fsck.erofs", "mkfs.erofs"} {
		if _, err := exec.LookPath(tool); err != nil {
			needs.Unavailable(t, tool+" is missing (make deps installs erofs-utils)")
		}
	}
	dir := t.TempDir()
	clean := filepath.Join(dir, "stdlib.pybox-image")
	if out, errOut, code := e.pybox("image", "export", "stdlib", clean); code != 0 {
		t.Fatalf("image export: exit %d\n%s%s", code, out, errOut)
	}
	heads, bodies := exportEntries(t, clean)
	img := filepath.Join(dir, "image.erofs")
	os.WriteFile(img, bodies["image.erofs"], 0o644)
	tree := filepath.Join(dir, "tree")
	for _, c := range [][]string{{"fsck.erofs", "--extract=" + tree, img}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	plant(tree)
	os.Remove(img)
	if out, err := exec.Command("mkfs.erofs", "-zlz4", "--quiet", img, tree).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v\n%s", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	bodies["image.erofs"] = b
	editMeta(t, bodies, map[string]any{"digest": hex.EncodeToString(sum[:]), "size": len(b)})
	out := filepath.Join(dir, "hostile.pybox-image")
	writeExport(t, out, heads, bodies)
	return out
}

// replace puts a link, a FIFO or a file at path in a tree.
func replace(t *testing.T, path string, make func(string) error) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := make(path); err != nil {
		t.Fatal(err)
	}
}

func TestHostileImage(t *testing.T) {
	e := newVMEnv(t)
	linkImages(t, e, "stdlib")
	secret := openTempDir(t)
	os.WriteFile(filepath.Join(secret, "secret.txt"), []byte("a secret the image must not reach\n"), 0o644)

	// The image's matplotlib seed is a link to a data folder's mount in
	// the guest, its preload list a FIFO, its warm list names /dev/zero
	// and a FIFO: a guest that followed any of them would leak the folder
	// into every box of the image, or hang.
	hostile := hostileImage(t, e, func(tree string) {
		share := filepath.Join(tree, "usr/share/pybox")
		replace(t, filepath.Join(share, "mplconfig"), func(p string) error { return os.Symlink("/run/data/secret", p) })
		replace(t, filepath.Join(share, "preload"), func(p string) error { return unix.Mkfifo(p, 0o644) })
		os.Symlink("/dev/zero", filepath.Join(share, "zero"))
		unix.Mkfifo(filepath.Join(share, "fifo"), 0o644)
		replace(t, filepath.Join(share, "warm.list"), func(p string) error {
			return os.WriteFile(p, []byte("/usr/share/pybox/zero\n/usr/share/pybox/fifo\n/usr/bin/python3\n"), 0o644)
		})
	})
	if out, errOut, code := e.pybox("image", "import", "--name", "hostile", hostile); code != 0 {
		t.Fatalf("importing an image whose metadata is sound: exit %d\n%s%s", code, out, errOut)
	}

	// The boot reads the image's warm list (a FIFO and /dev/zero in it)
	// and its description: it must come up as any boot does.
	t.Logf("%s", e.mustStart("--images", "stdlib,hostile", "--memory", "1024", "--data", "secret="+secret))

	t.Run("a call in the image is refused at once, saying why, and reaches nothing", func(t *testing.T) {
		t0 := time.Now()
		r := runPy(t, e, "import os\nprint(sorted(os.listdir('/tmp/.config/matplotlib')))\n", "--image", "hostile", "--data", "secret", "--timeout", "10")
		rc := r.receipt(t)
		if took := time.Since(t0); took > 30*time.Second {
			t.Errorf("the call took %v", took)
		}
		if rc.Status != wire.StatusRefused || !strings.Contains(rc.Reason, "usr/share/pybox/mplconfig") || !strings.Contains(rc.Reason, "symbolic link") ||
			rc.Cleanup.Status != wire.CleanupRemoved {
			t.Errorf("status %s (%s), cleanup %+v", rc.Status, rc.Reason, rc.Cleanup)
		}
		if strings.Contains(rc.Capture.Stdout, "secret") {
			t.Errorf("the box saw the data folder through the image: %q", rc.Capture.Stdout)
		}
	})

	t.Run("the image's warm box fails with the reason, and other images stay warm", func(t *testing.T) {
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(agentConsole(t, e.home, "log"), "the preload list") {
			if time.Now().After(deadline) {
				t.Fatalf("no word of the preload list in the log:\n%s", agentConsole(t, e.home, "log"))
			}
			time.Sleep(300 * time.Millisecond)
		}
		if log := agentConsole(t, e.home, "log"); !strings.Contains(log, "is not a regular file") {
			t.Errorf("the log does not say what the preload list is:\n%s", log)
		}
		waitWarmReady(t, e.home, "stdlib")
		rc := expectEnd(t, runPy(t, e, `print("stdlib")`, "--timeout", "10"), wire.StatusOK)
		if rc.Box == nil || !rc.Box.Warm {
			t.Errorf("stdlib ran %+v", rc.Box)
		}
	})
	expectClean(t, e)

	// Metadata that would write to the terminal is refused at import, and
	// nothing of the image is left.
	t.Run("an image whose metadata holds escape codes is refused", func(t *testing.T) {
		dir := t.TempDir()
		clean := filepath.Join(dir, "stdlib.pybox-image")
		if out, errOut, code := e.pybox("image", "export", "stdlib", clean); code != 0 {
			t.Fatalf("image export: exit %d\n%s%s", code, out, errOut)
		}
		heads, bodies := exportEntries(t, clean)
		editMeta(t, bodies, map[string]any{"python": "3.13.5\x1b]52;c;cHlib3g=\x07"})
		bad := filepath.Join(dir, "osc.pybox-image")
		writeExport(t, bad, heads, bodies)
		out, errOut, code := e.pybox("image", "import", "--name", "osc", bad)
		if code == 0 || strings.Contains(out+errOut, "\x1b") || !strings.Contains(errOut, "nothing was imported") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if list, _, _ := e.pybox("image", "list"); strings.Contains(list, "osc") {
			t.Errorf("image list shows the refused image:\n%s", list)
		}
	})
}
