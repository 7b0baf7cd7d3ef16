package supervisor

import (
	"errors"
	"fmt"
	"strings"

	"pybox/host/folder"
	"pybox/host/vm"
	"pybox/shared/wire"
)

// openFolders opens each data folder once, for the supervisor's life:
// the VM is given these directories (the jail checks it binds the same
// ones), and every walk starts from them.
func (s *supervisor) openFolders() error {
	for i := range s.cfg.VM.Data {
		d := &s.cfg.VM.Data[i]
		f, err := folder.Open(d.Folder)
		if err != nil {
			s.closeFolders()
			return fmt.Errorf("data folder %s: %w", d.Name, err)
		}
		d.Dir = f
	}
	return nil
}

func (s *supervisor) closeFolders() {
	for i := range s.cfg.VM.Data {
		if d := &s.cfg.VM.Data[i]; d.Dir != nil {
			d.Dir.Close()
			d.Dir = nil
		}
	}
}

// checkFolders walks each data folder as the VM is about to be given it:
// a folder holding a hard link or a device, FIFO or socket is refused
// here, before the VM can reach it, not only when a call names it.
func (s *supervisor) checkFolders() error {
	for _, d := range s.cfg.VM.Data {
		rep, err := folder.ListDir(d.Dir, folder.DefaultLimits)
		if err != nil {
			return fmt.Errorf("data folder %s (%s): %w", d.Name, d.Folder, err)
		}
		s.logf("data folder %s: %d files, %d bytes, checked in %v", d.Name, rep.Files, rep.Bytes, rep.Took)
	}
	return nil
}

// prepareRun walks each data folder a run names (host/folder): it
// refuses a folder the VM may not be given, and returns the host's record
// of each, in the run's order, for its receipt: the host folder as the
// user configured it, what it held, and what of it the box does not get
// as a plain file. It is given the run's header, which names the folders
// and bounds what they hold together; the guest is told the names only
// (wire.RunHeader). Several runs may be prepared at once: it reads and
// changes nothing.
func (s *supervisor) prepareRun(run *wire.RunHeader) ([]wire.DataFolder, *wire.Error) {
	shares := map[string]vm.DataShare{}
	var names []string
	for _, d := range s.cfg.VM.Data {
		shares[d.Name] = d
		names = append(names, d.Name)
	}
	var total int64
	record := make([]wire.DataFolder, 0, len(run.Data))
	for _, want := range run.Data {
		d, ok := shares[want]
		if !ok {
			have := "none (start it with `pybox vm start --data NAME=DIR`)"
			if len(names) > 0 {
				have = strings.Join(names, ", ")
			}
			return nil, &wire.Error{Code: wire.ErrNoData, Message: fmt.Sprintf("this VM has no data folder %q; it has: %s", want, have)}
		}
		lim := folder.DefaultLimits
		if run.MaxDataBytes > 0 {
			lim.MaxBytes = run.MaxDataBytes - total
		}
		if err := folder.Same(d.Dir, d.Folder); err != nil {
			return nil, &wire.Error{Code: wire.ErrBadRequest, Message: fmt.Sprintf("data folder %s: %v", d.Name, err)}
		}
		rep, err := folder.ListDir(d.Dir, lim)
		if errors.Is(err, folder.ErrTooLarge) && run.MaxDataBytes > 0 {
			return nil, &wire.Error{Code: wire.ErrBadRequest, Message: fmt.Sprintf(
				"data folder %s is too large for one call (%v); this server allows %d bytes of data folders per call (its --max-data-bytes)",
				d.Name, err, run.MaxDataBytes)}
		}
		if err != nil {
			return nil, &wire.Error{Code: wire.ErrBadRequest, Message: fmt.Sprintf("data folder %s: %v", d.Name, err)}
		}
		total += rep.Bytes
		s.logf("data folder %s: %d files, %d bytes, listed in %v", d.Name, rep.Files, rep.Bytes, rep.Took)
		record = append(record, wire.DataFolder{Name: d.Name, HostPath: d.Folder, Files: rep.Files, Bytes: rep.Bytes,
			Digest: rep.Digest, LeftOut: rep.LeftOutLines()})
	}
	return record, nil
}
