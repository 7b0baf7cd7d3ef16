package client

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"pybox/host/escape"
	"pybox/shared/wire"
)

// Bounds on what a result from the guest may hold, beyond what the strict
// decoding and the frame's 1 MiB already bound. The guest keeps to far
// less; these only stop a confused or hostile guest from crowding out
// the rest, on every side that shows a receipt (`pybox run`, `pybox mcp`,
// `pybox check`).
const (
	maxShortString = 128  // status, signal, image, agent, posture fields, a digest, a reason a file did not come
	maxTextString  = 2048 // a run's reason, a cleanup detail, an overrun, a posture problem, an error message
	maxNameString  = 200  // a file name, escaped
	maxListed      = 64   // items of a list of strings (posture, overruns, preloaded modules)
	maxLeftOut     = 8    // lines of what a data folder's box does not see
)

// Result is a run's result as the host takes it: the guest's answer with
// every string and list the guest controls bounded to what the contract
// allows, file names escaped, each stream's controls counted by the host,
// and the host's own records of the run's data folders and connections
// in its receipt.
// The client returns no other; what comes after it (`pybox run`, the MCP
// server) takes it as given and only fits it to its own output.
type Result struct {
	wire.Result
	cut bool
}

// Cut reports whether fields of the guest's answer were over their
// bounds and were cut.
func (r *Result) Cut() bool { return r.cut }

// NewResult makes the host's Result of what the guest answered to a run
// and of the host's record of the run's data folders (nil for a run that
// named none: what the guest says of them proves nothing). Its Network
// is nil whatever the guest said: the client puts in the host's record
// of the connections of a run that may reach the network. guest is left
// as it was. The client takes every receipt through it; a stand-in for
// the client (a test's fake VM) must as well.
func NewResult(guest *wire.Result, host *wire.HostFacts) *Result {
	b := &bounder{}
	res := &Result{Result: wire.Result{Receipt: guest.Receipt}}
	r := &res.Receipt
	r.Data, r.Network = nil, nil
	if host != nil {
		r.Data = b.data(host.Data)
	}
	b.receipt(r)
	res.Files = b.files(guest.Files)
	res.cut = b.cut
	return res
}

// setNetwork puts the host's record of the run's connections in r's
// receipt, bounded.
func (r *Result) setNetwork(nw *wire.Network) {
	b := &bounder{}
	r.Receipt.Network = b.network(nw)
	r.cut = r.cut || b.cut
}

// bounder cuts what it is given to its bounds, in copies, and remembers
// whether it cut anything.
type bounder struct{ cut bool }

// str cuts *p to n bytes.
func (b *bounder) str(p *string, n int) {
	if len(*p) > n {
		*p, b.cut = Cut(*p, n), true
	}
}

// head is the first most items of in.
func head[T any](b *bounder, in []T, most int) []T {
	if len(in) > most {
		b.cut = true
		return in[:most]
	}
	return in
}

// receipt bounds r, whose lists are still the guest's: each list it
// changes is a copy.
func (b *bounder) receipt(r *wire.Receipt) {
	for _, f := range []struct {
		p *string
		n int
	}{
		{&r.RunID, wire.MaxRunIDBytes}, {&r.Status, maxShortString}, {&r.Reason, maxTextString},
		{&r.Signal, maxShortString}, {&r.Image.Name, maxShortString}, {&r.Image.Digest, maxShortString},
		{&r.Image.Python, maxShortString}, {&r.Image.Suite, maxShortString},
		{&r.Agent.Version, maxShortString}, {&r.Agent.Commit, maxShortString}, {&r.Agent.Kernel, maxShortString},
		{&r.Memory.Reading, maxShortString}, {&r.Cleanup.Status, maxShortString}, {&r.Cleanup.Detail, maxTextString},
	} {
		b.str(f.p, f.n)
	}
	if r.Cleanup.Status == "" {
		r.Cleanup = *wire.Unknown("the guest's receipt gave no cleanup status")
	}
	b.capture(&r.Capture)
	r.InputFiles = b.digests(r.InputFiles, wire.MaxInputFiles)
	b.output(&r.Output)
	r.Overruns = b.strings(r.Overruns, maxTextString)
	if r.Box != nil {
		bi := *r.Box
		bi.Preloaded = b.strings(bi.Preloaded, maxShortString)
		b.str(&bi.Fallback, maxTextString)
		r.Box = &bi
	}
	if r.Posture != nil {
		p := *r.Posture
		b.str(&p.CapEff, maxShortString)
		p.OpenFDs = head(b, p.OpenFDs, maxListed)
		p.Namespaces = b.strings(p.Namespaces, maxShortString)
		p.Problems = b.strings(p.Problems, maxTextString)
		r.Posture = &p
	}
}

// capture keeps each stream to what a run may keep (max_output_bytes is
// at most 8 KiB) and counts its controls: the host's count, not the
// guest's.
func (b *bounder) capture(c *wire.Capture) {
	out, errs := c.Stdout, c.Stderr
	c.Stdout, c.Stderr = CutUTF8(out, wire.MaxOutputBytes), CutUTF8(errs, wire.MaxOutputBytes)
	b.cut = b.cut || len(c.Stdout) != len(out) || len(c.Stderr) != len(errs)
	escape.MarkCapture(c)
}

// output bounds the lists of /tmp/output. Files not brought back or not
// delivered beyond the first 16 are counted, not listed, as the guest
// itself does.
func (b *bounder) output(o *wire.Output) {
	o.Returned = b.digests(o.Returned, wire.MaxReturnedFiles)
	o.Delivered = b.digests(o.Delivered, wire.MaxDeliveredFiles)
	if o.DeliveredAll != nil {
		all := *o.DeliveredAll
		b.str(&all.SHA256, maxShortString)
		o.DeliveredAll = &all
	}
	var more int
	o.NotReturned, more = b.missing(o.NotReturned)
	o.NotListed += more
	o.NotDelivered, more = b.missing(o.NotDelivered)
	o.NotDeliveredUnlisted += more
}

// missing bounds a list of files that did not come, and says how many it
// left out.
func (b *bounder) missing(in []wire.NotReturned) (out []wire.NotReturned, more int) {
	if in == nil {
		return nil, 0
	}
	out = slices.Clone(head(b, in, wire.MaxListedNotReturned))
	for i := range out {
		out[i].Name = b.name(out[i].Name)
		b.str(&out[i].Reason, maxShortString)
		b.str(&out[i].SHA256, maxShortString)
	}
	return out, len(in) - len(out)
}

func (b *bounder) digests(in []wire.FileDigest, most int) []wire.FileDigest {
	if in == nil {
		return nil
	}
	out := slices.Clone(head(b, in, most))
	for i := range out {
		out[i].Name = b.name(out[i].Name)
		b.str(&out[i].SHA256, maxShortString)
	}
	return out
}

// files bounds the files brought back; their content the frame bounds.
func (b *bounder) files(in []wire.OutputFile) []wire.OutputFile {
	if in == nil {
		return nil
	}
	out := slices.Clone(head(b, in, wire.MaxReturnedFiles))
	for i := range out {
		out[i].Name = b.name(out[i].Name)
	}
	return out
}

// data bounds the host's record of the run's data folders.
func (b *bounder) data(in []wire.DataFolder) []wire.DataFolder {
	out := slices.Clone(head(b, in, wire.MaxDataFolders))
	for i := range out {
		d := &out[i]
		b.str(&d.Name, maxShortString)
		b.str(&d.HostPath, maxTextString)
		b.str(&d.Digest, maxShortString)
		d.LeftOut = b.strings(head(b, d.LeftOut, maxLeftOut), maxShortString)
	}
	return out
}

// network bounds the host's record of a run's connections: hosts and
// reasons are the box's, or quote it.
func (b *bounder) network(in *wire.Network) *wire.Network {
	if in == nil {
		return nil
	}
	nw := *in
	b.str(&nw.Allowed, maxTextString)
	listed := head(b, in.Connections, wire.MaxNetListed)
	nw.NotListed += len(in.Connections) - len(listed)
	nw.Connections = slices.Clone(listed)
	for i := range nw.Connections {
		c := &nw.Connections[i]
		c.Host = b.name(c.Host)
		b.str(&c.Address, maxShortString)
		b.str(&c.Kind, maxShortString)
		b.str(&c.Why, maxTextString)
	}
	return &nw
}

// strings bounds a list of strings: its first maxListed items, each cut
// to n, then a line that counts the rest.
func (b *bounder) strings(in []string, n int) []string {
	if in == nil {
		return nil
	}
	out := slices.Clone(head(b, in, maxListed))
	for i := range out {
		b.str(&out[i], n)
	}
	if len(in) > maxListed {
		out = append(out, fmt.Sprintf("… and %d more", len(in)-maxListed))
	}
	return out
}

// name shows a file name from the guest safely: escaped when it holds
// anything wire.EscapeName would escape besides a backslash (a name the
// guest escaped already is left as it is), and bounded.
func (b *bounder) name(name string) string {
	raw := !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool {
		return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
	})
	if raw {
		name = wire.EscapeName(name)
	}
	b.str(&name, maxNameString)
	return name
}

// boundError bounds an error the guest or the supervisor answered a run
// with, in a copy.
func boundError(in *wire.Error) *wire.Error {
	b := &bounder{}
	e := *in
	b.str(&e.Code, maxShortString)
	b.str(&e.Message, maxTextString)
	if in.Cleanup != nil {
		c := *in.Cleanup
		b.str(&c.Status, maxShortString)
		b.str(&c.Detail, maxTextString)
		e.Cleanup = &c
	}
	return &e
}

// Cut cuts s to at most n bytes, at a rune boundary, and marks the cut
// with "…": how a string over its bound is shown.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return CutUTF8(s, n) + "…"
}

// CutUTF8 cuts s to at most n bytes, backing off to a rune boundary.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Label makes who fit wire.Run.Client: control characters become
// spaces, and it is cut, whole characters only, to MaxClientBytes.
func Label(who string) string {
	who = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(who, "\uFFFD"))
	return CutUTF8(who, wire.MaxClientBytes)
}
