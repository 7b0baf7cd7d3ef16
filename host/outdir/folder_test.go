package outdir

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pybox/shared/wire"
)

// helperEnv makes the test binary a second process that admits one run
// (see helperMain): flock is between processes, and only another
// process tests it for real.
const helperEnv = "PYBOX_OUTDIR_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperMain(dir))
	}
	os.Exit(m.Run())
}

// helperMain admits one run into dir, bounded by the cost in
// PYBOX_OUTDIR_MAX, prints "room N" or "full", and once its stdin is
// closed writes PYBOX_OUTDIR_FILES empty files and finishes.
func helperMain(dir string) int {
	maxCost, _ := strconv.ParseInt(os.Getenv("PYBOX_OUTDIR_MAX"), 10, 64)
	files, _ := strconv.Atoi(os.Getenv("PYBOX_OUTDIR_FILES"))
	d, err := Folder{Path: dir, MaxCost: maxCost, MaxEntries: DefaultMaxEntries}.Admit(wire.NewRunID("helper-"), Options{MaxBytes: 64 << 10})
	var full *FullError
	if errors.As(err, &full) {
		fmt.Println("full")
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("room", d.Room())
	io.Copy(io.Discard, os.Stdin)
	finishEmpty(d, files)
	return 0
}

// finishEmpty delivers n empty files into d and finishes it.
func finishEmpty(d *Dir, n int) ([]Saved, []string) {
	var listed []wire.FileDigest
	for i := range n {
		name := fmt.Sprintf("e%04d", i)
		d.Chunk(&wire.OutputChunk{Name: name})
		listed = append(listed, digest(name, nil))
	}
	return d.Finish(listed)
}

// ledgerOf reads dir's ledger as a server would.
func ledgerOf(t *testing.T, dir string) *ledger {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ledgerName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, ok, err := readLedger(f)
	if err != nil || !ok {
		t.Fatalf("the ledger cannot be read: %v", err)
	}
	return l
}

func measured(t *testing.T, path string) Usage {
	t.Helper()
	u, err := Measure(path)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The cost model: an empty file costs its entry, a 1-byte file a block
// and its entry; what is measured is what stat says is allocated, as du
// counts it, and where blocks are 4 KiB the prediction is the measure.
func TestCostModel(t *testing.T) {
	for size, want := range map[int64]int64{0: EntryCost, 1: BlockSize + EntryCost, BlockSize: BlockSize + EntryCost, BlockSize + 1: 2*BlockSize + EntryCost} {
		if got := FileCost(size); got != want {
			t.Errorf("FileCost(%d) = %d, want %d", size, got, want)
		}
	}
	dir := t.TempDir()
	empty, one := filepath.Join(dir, "empty"), filepath.Join(dir, "one")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(one, []byte("x"), 0o644)
	if u := measured(t, empty); u != (Usage{Bytes: 0, Entries: 1}) || u.Cost() != EntryCost {
		t.Errorf("an empty file measures %+v (cost %d), want no bytes and one entry", u, u.Cost())
	}
	var st unix.Stat_t
	unix.Stat(one, &st)
	if u := measured(t, one); u != (Usage{Bytes: st.Blocks * 512, Entries: 1}) {
		t.Errorf("a 1-byte file measures %+v; stat says %d blocks of 512", u, st.Blocks)
	}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil && fs.Bsize == BlockSize {
		if u := measured(t, one); u.Cost() != FileCost(1) {
			t.Errorf("a 1-byte file costs %d measured, %d predicted", u.Cost(), FileCost(1))
		}
	}
	var dst unix.Stat_t
	unix.Stat(dir, &dst)
	if u := measured(t, dir); u != (Usage{Bytes: dst.Blocks*512 + st.Blocks*512, Entries: 3}) {
		t.Errorf("the folder measures %+v: its own blocks, the files', and three entries", u)
	}
}

// A run cannot pass its room by writing many tiny files: each costs its
// entry, and the files past the room are not written.
func TestManyEmptyFilesBounded(t *testing.T) {
	parent := t.TempDir()
	room := int64(runDirCost + 10*EntryCost)
	saved, notes := finishEmpty(New(parent, "r", Options{MaxBytes: room}), 1000)
	if len(saved) != 10 || len(notes) != 990 || !strings.Contains(notes[0], fmt.Sprintf("over the %d bytes one run may write here", room)) {
		t.Fatalf("saved %d files, %d notes: %.200q", len(saved), len(notes), notes)
	}
	if u := measured(t, filepath.Join(parent, "r")); u.Cost() > room {
		t.Errorf("the run's directory costs %d (%+v), over its room of %d", u.Cost(), u, room)
	}
	// The entry bound of a folder with few entries left.
	saved, notes = finishEmpty(New(parent, "r2", Options{MaxEntries: 4}), 5)
	if len(saved) != 3 || !strings.Contains(notes[0], "over the 3 files the output folder has room for") {
		t.Errorf("saved %d files, notes %q", len(saved), notes)
	}
}

// The ledger keeps the running total: after runs it says what a walk
// says, and admission trusts it without a walk (a file put by hand
// inside a run's directory, which leaves the folder's stat alone, is not
// seen).
func TestLedgerKeepsTotal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out") // made by the first admission
	f := Folder{Path: dir, MaxCost: 1 << 30, MaxEntries: DefaultMaxEntries}
	for i, n := range []int{0, 3, 300} {
		d, err := f.Admit(fmt.Sprintf("run%d", i), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r := ledgerOf(t, dir).Reserved; len(r) != 1 || r[0].Run != fmt.Sprintf("run%d", i) || r[0].PID != os.Getpid() || r[0].Cost != MaxRunCost {
			t.Fatalf("while run%d runs the ledger reserves %+v", i, r)
		}
		finishEmpty(d, n)
		l := ledgerOf(t, dir)
		if len(l.Reserved) != 0 || l.held() != measured(t, dir) {
			t.Fatalf("after run%d (%d files) the ledger says %+v, a walk %+v", i, n, l, measured(t, dir))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run0")); !os.IsNotExist(err) {
		t.Errorf("a run that kept nothing left its directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "run1", "by-hand"), []byte("x"), 0o644)
	before := ledgerOf(t, dir).held()
	d, err := f.Admit("run3", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ledgerOf(t, dir).held(); got != before {
		t.Errorf("admission with a trusted ledger walked the folder: %+v, then %+v", before, got)
	}
	d.Abort()
	if l := ledgerOf(t, dir); len(l.Reserved) != 0 || l.held() != before {
		t.Errorf("after Abort the ledger says %+v, want %+v and nothing reserved", l, before)
	}
}

// A full folder is refused with what it holds; the user deleting runs by
// hand (the folder's stat changes), or files inside a run (it does not),
// makes room that the next admission finds.
func TestFullThenRoomMadeByHand(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Path: dir, MaxCost: 300 * EntryCost, MaxEntries: DefaultMaxEntries}
	var runs []string
	for i := 0; ; i++ {
		d, err := f.Admit(fmt.Sprintf("run%d", i), Options{MaxBytes: 100 * EntryCost})
		var full *FullError
		if errors.As(err, &full) {
			u := measured(t, dir)
			if full.Held != u || full.MaxCost != f.MaxCost || full.ByEntries || u.Cost()+minRoom <= f.MaxCost {
				t.Fatalf("refused with %+v; the folder measures %+v (cost %d)", full, u, u.Cost())
			}
			break
		}
		if err != nil || i > 10 {
			t.Fatalf("run%d: %v", i, err)
		}
		finishEmpty(d, 1000)
		runs = append(runs, d.Path())
	}
	if len(runs) < 2 {
		t.Fatalf("only %d runs fit", len(runs))
	}
	if u := measured(t, dir); u.Cost() > f.MaxCost+BlockSize {
		t.Errorf("the folder costs %d, over its bound of %d", u.Cost(), f.MaxCost)
	}
	os.RemoveAll(runs[0])
	d, err := f.Admit("after-delete", Options{})
	if err != nil {
		t.Fatalf("after a run was deleted by hand: %v", err)
	}
	finishEmpty(d, 1000) // fills it again
	if _, err := f.Admit("full-again", Options{}); err == nil {
		t.Fatal("the folder was not full again")
	}
	names, _ := readNames(runs[1])
	for _, n := range names {
		os.Remove(filepath.Join(runs[1], n)) // the run's directory stays: the folder's stat does not change
	}
	if d, err := f.Admit("after-files-deleted", Options{}); err != nil {
		t.Errorf("after files inside a run were deleted by hand: %v", err)
	} else {
		d.Abort()
	}
}

// The entry cap is a bound of its own: a folder of many empty files is
// full by entries before it is by cost.
func TestEntryCap(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Path: dir, MaxCost: 1 << 40, MaxEntries: 20}
	d, err := f.Admit("r1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	saved, _ := finishEmpty(d, 30)
	if used := measured(t, dir).Entries; len(saved) == 0 || used > f.MaxEntries {
		t.Fatalf("kept %d files; the folder holds %d entries, over %d", len(saved), used, f.MaxEntries)
	}
	for i := 0; ; i++ {
		_, err := f.Admit(fmt.Sprintf("more%d", i), Options{})
		var full *FullError
		if errors.As(err, &full) {
			if !full.ByEntries || full.MaxEntries != 20 {
				t.Errorf("refused with %+v", full)
			}
			break
		}
		if err != nil || i > 20 {
			t.Fatalf("more%d: %v", i, err)
		}
	}
}

// Goroutines reserving at once never reserve together more than the
// folder has left.
func TestConcurrentAdmission(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Path: dir, MaxCost: 1 << 20, MaxEntries: DefaultMaxEntries}
	var mu sync.Mutex
	var admitted []*Dir
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			d, err := f.Admit(fmt.Sprintf("g%d", i), Options{MaxBytes: 200 << 10})
			var full *FullError
			if err != nil && !errors.As(err, &full) {
				t.Error(err)
			}
			if d != nil {
				mu.Lock()
				admitted = append(admitted, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var rooms int64
	for _, d := range admitted {
		rooms += d.Room()
	}
	held := ledgerOf(t, dir).held().Cost()
	if len(admitted) == 16 || held+rooms > f.MaxCost {
		t.Errorf("%d admitted with %d bytes of room, on top of %d held: over %d", len(admitted), rooms, held, f.MaxCost)
	}
	for _, d := range admitted {
		finishEmpty(d, 40)
	}
	if u := measured(t, dir); u.Cost() > f.MaxCost || ledgerOf(t, dir).held() != u {
		t.Errorf("the folder measures %+v (cost %d of %d); the ledger says %+v", u, u.Cost(), f.MaxCost, ledgerOf(t, dir).held())
	}
}

// helper is a second process holding a run admitted into a folder.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  string // "room N" or "full"
}

func startHelper(t *testing.T, dir string, maxCost int64, files int) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, fmt.Sprintf("PYBOX_OUTDIR_MAX=%d", maxCost), fmt.Sprintf("PYBOX_OUTDIR_FILES=%d", files))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h := &helper{cmd: cmd, stdin: stdin}
	h.line, _ = bufio.NewReader(stdout).ReadString('\n')
	h.line = strings.TrimSpace(h.line)
	return h
}

// Processes reserving at once, each with its own open of the ledger,
// never reserve together more than the folder has left: flock between
// processes. And a process killed while it holds a reservation does not
// keep it: the next admission sees its owner gone, and counts what its
// directory holds instead.
func TestProcessesShareTheBound(t *testing.T) {
	dir := t.TempDir()
	const maxCost = 400 << 10 // room for a few runs of 64 KiB
	helpers := make([]*helper, 10)
	var wg sync.WaitGroup
	for i := range helpers {
		wg.Go(func() { helpers[i] = startHelper(t, dir, maxCost, 5) })
	}
	wg.Wait()
	var rooms int64
	var admitted []*helper
	for _, h := range helpers {
		switch {
		case strings.HasPrefix(h.line, "room "):
			n, _ := strconv.ParseInt(strings.TrimPrefix(h.line, "room "), 10, 64)
			rooms += n
			admitted = append(admitted, h)
		case h.line != "full":
			t.Fatalf("a helper said %q", h.line)
		}
	}
	held := ledgerOf(t, dir).held().Cost()
	if len(admitted) == 0 || len(admitted) == len(helpers) || held+rooms > maxCost {
		t.Fatalf("%d of %d processes admitted, with %d bytes of room on top of %d held: the bound is %d", len(admitted), len(helpers), rooms, held, maxCost)
	}
	// One is killed holding its reservation; the others finish, and
	// the first to take the lock after it sees its owner gone.
	killed := admitted[0].cmd
	killed.Process.Kill()
	killed.Wait()
	if r := ledgerOf(t, dir).Reserved; len(r) != len(admitted) {
		t.Fatalf("the ledger reserves %+v, want one for each admitted process", r)
	}
	for _, h := range admitted[1:] {
		h.stdin.Close()
		if err := h.cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Folder{Path: dir, MaxCost: maxCost, MaxEntries: DefaultMaxEntries}.Admit("after", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := ledgerOf(t, dir)
	if len(l.Reserved) != 1 || l.Reserved[0].Run != "after" {
		t.Errorf("the dead process's reservation is kept: %+v", l.Reserved)
	}
	d.Abort()
	if l := ledgerOf(t, dir); l.held() != measured(t, dir) {
		t.Errorf("the ledger says %+v, a walk %+v", l.held(), measured(t, dir))
	}
}

// A reservation whose owner is gone (a process that exited, or one past
// its expiry) is dropped, and what its directory holds is counted.
func TestStaleReservations(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Path: dir, MaxCost: 1 << 30, MaxEntries: DefaultMaxEntries}
	d, err := f.Admit("first", Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Abort()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// Directories the dead owners wrote into, made under the lock as an
	// owner would, so that the ledger stays trusted.
	lf, _ := lockLedger(dir, false)
	l, _, _ := load(lf, dir)
	l.change(dir, func() error {
		for _, run := range []string{"dead-pid", "expired"} {
			os.Mkdir(filepath.Join(dir, run), 0o755)
			os.WriteFile(filepath.Join(dir, run, "part"), []byte("partial"), 0o644)
		}
		return nil
	})
	far := time.Now().Add(time.Hour).Unix()
	l.Reserved = []reservation{
		{Run: "dead-pid", Host: thisHost(), PID: gone.Process.Pid, Until: far, Cost: 1 << 20, Entries: 10},
		{Run: "expired", Host: "another-host", PID: 1, Until: time.Now().Add(-time.Second).Unix(), Cost: 1 << 20, Entries: 10},
		{Run: "alive", Host: "another-host", PID: 1, Until: far, Cost: 1 << 20, Entries: 10},
	}
	l.write(lf)
	unlock(lf)
	d, err = f.Admit("next", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l = ledgerOf(t, dir)
	var runs []string
	for _, r := range l.Reserved {
		runs = append(runs, r.Run)
	}
	if !slices.Equal(runs, []string{"alive", "next"}) {
		t.Errorf("reservations %q, want the live one's and the new run's", runs)
	}
	d.Abort()
	if l := ledgerOf(t, dir); l.held() != measured(t, dir) {
		t.Errorf("the ledger says %+v, a walk %+v: the dead runs' directories must be counted", l.held(), measured(t, dir))
	}
}

// A ledger that is torn, of another version or not PyBox's is not
// trusted: the folder is measured anew.
func TestUntrustedLedger(t *testing.T) {
	dir := t.TempDir()
	f := Folder{Path: dir, MaxCost: 1 << 30, MaxEntries: DefaultMaxEntries}
	d, _ := f.Admit("r", Options{})
	finishEmpty(d, 20)
	for _, bad := range []string{`{"version":1,"bytes":0,"ent`, `{"version":2,"bytes":0,"entries":0}`, `not json`,
		`{"version":1,"folder":{},"bytes":0,"entries":0,"reserved":[{"run":"../..","cost":1}]}`} {
		os.WriteFile(filepath.Join(dir, ledgerName), []byte(bad), 0o644)
		d, err := f.Admit("again", Options{})
		if err != nil {
			t.Fatal(err)
		}
		d.Abort()
		if l := ledgerOf(t, dir); l.held() != measured(t, dir) || len(l.Reserved) != 0 {
			t.Errorf("after the ledger %q: %+v, a walk %+v", bad, l, measured(t, dir))
		}
	}
}

// pybox run --out has no bound: a folder without a ledger gets nothing
// of PyBox's, and one with a ledger has the run recorded, so that the
// servers' total stays right.
func TestUnboundedFolder(t *testing.T) {
	dir := t.TempDir()
	d, err := Folder{Path: dir}.Admit("plain", Options{})
	if err != nil {
		t.Fatal(err)
	}
	finishEmpty(d, 2)
	if got := names(t, dir); !slices.Equal(got, []string{"plain"}) {
		t.Errorf("a folder without a ledger holds %q", got)
	}
	bounded := Folder{Path: dir, MaxCost: 1 << 30, MaxEntries: DefaultMaxEntries}
	d, _ = bounded.Admit("server", Options{})
	d.Abort()
	d, err = Folder{Path: dir}.Admit("cli", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := ledgerOf(t, dir).Reserved; len(r) != 1 || r[0].Run != "cli" {
		t.Errorf("pybox run's reservation: %+v", r)
	}
	finishEmpty(d, 50)
	if l := ledgerOf(t, dir); l.held() != measured(t, dir) || len(l.Reserved) != 0 {
		t.Errorf("after pybox run the ledger says %+v, a walk %+v", l, measured(t, dir))
	}
}

// An output folder that is a symbolic link (~/pybox-results leading to a
// larger disk) is measured where it leads.
func TestFolderThroughLink(t *testing.T) {
	real, link := t.TempDir(), filepath.Join(t.TempDir(), "results")
	os.Symlink(real, link)
	os.Mkdir(filepath.Join(real, "earlier"), 0o755)
	os.WriteFile(filepath.Join(real, "earlier", "a"), make([]byte, 10000), 0o644)
	d, err := Folder{Path: link, MaxCost: 1 << 30, MaxEntries: DefaultMaxEntries}.Admit("r", Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Abort()
	if l := ledgerOf(t, real); l.held() != measured(t, real) {
		t.Errorf("the ledger says %+v, a walk of where the link leads %+v", l.held(), measured(t, real))
	}
}
