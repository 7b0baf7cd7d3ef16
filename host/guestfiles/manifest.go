package guestfiles

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ManifestName is the manifest's file name, beside the guest files.
const ManifestName = "manifest.json"

// Manifest describes a directory of guest files: what `make` built and
// `make install` copied.
type Manifest struct {
	Arch string `json:"arch"`
	// AgentVersion and AgentCommit are stamped into the guest agent (the
	// initramfs's /init); its hello says the same once it boots.
	AgentVersion string `json:"agent_version"`
	AgentCommit  string `json:"agent_commit"`
	Files        []Sum  `json:"files"`
}

// Sum is one file's name (in the manifest's directory), size and sha256.
type Sum struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// MakeManifest hashes the kernel and initramfs of arch in dir and writes
// dir/manifest.json. The file depends only on its inputs, so the same
// files give the same manifest.
func MakeManifest(dir, arch, agentVersion, agentCommit string) (*Manifest, error) {
	m := &Manifest{Arch: arch, AgentVersion: agentVersion, AgentCommit: agentCommit}
	for _, name := range []string{KernelName(arch), InitramfsName} {
		s, err := sumFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("guestfiles: %w", err)
		}
		s.Name = name
		m.Files = append(m.Files, s)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	p := filepath.Join(dir, ManifestName)
	// The same manifest again is left alone, so its time says when the
	// files last changed.
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
		return m, nil
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return nil, fmt.Errorf("guestfiles: %w", err)
	}
	return m, nil
}

// ReadManifest reads dir/manifest.json; (nil, nil) when there is none.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("guestfiles: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("guestfiles: %s: %w", p, err)
	}
	return &m, nil
}

func (m *Manifest) lookup(name string) (Sum, bool) {
	for _, s := range m.Files {
		if s.Name == name {
			return s, true
		}
	}
	return Sum{}, false
}

func sumFile(path string) (Sum, error) {
	f, err := os.Open(path)
	if err != nil {
		return Sum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Sum{}, err
	}
	return Sum{Name: filepath.Base(path), Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Checked is a guest file with its digest and what the manifest beside
// it says of it.
type Checked struct {
	File
	Sum
	// Manifest is "matches", "differs (manifest: sha256 ...)", "not listed"
	// or "no manifest".
	Manifest string `json:"manifest"`
}

// Report is what `pybox version` says about the guest files.
type Report struct {
	Arch      string  `json:"arch"`
	Kernel    Checked `json:"kernel"`
	Initramfs Checked `json:"initramfs"`
	// ManifestPath is the manifest beside the initramfs ("" when none);
	// AgentVersion and AgentCommit are what it says of the agent, set
	// only when the initramfs matches it.
	ManifestPath string `json:"manifest_path,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
	AgentCommit  string `json:"agent_commit,omitempty"`
}

// Check hashes the files and compares each with the manifest in its own
// directory. The initramfs's manifest says which agent it holds.
func (f *Files) Check() (*Report, error) {
	r := &Report{Arch: f.Arch}
	var err error
	if r.Kernel, _, err = check(f.Kernel); err != nil {
		return nil, err
	}
	var m *Manifest
	if r.Initramfs, m, err = check(f.Initramfs); err != nil {
		return nil, err
	}
	if m != nil {
		r.ManifestPath = filepath.Join(filepath.Dir(f.Initramfs.Path), ManifestName)
		if r.Initramfs.Manifest == "matches" {
			r.AgentVersion, r.AgentCommit = m.AgentVersion, m.AgentCommit
		}
	}
	return r, nil
}

func check(f File) (Checked, *Manifest, error) {
	s, err := sumFile(f.Path)
	if err != nil {
		return Checked{}, nil, fmt.Errorf("guestfiles: %w", err)
	}
	c := Checked{File: f, Sum: s, Manifest: "no manifest"}
	m, err := ReadManifest(filepath.Dir(f.Path))
	if err != nil || m == nil {
		return c, nil, err
	}
	want, ok := m.lookup(filepath.Base(f.Path))
	switch {
	case !ok:
		c.Manifest = "not listed in its manifest"
	case want.SHA256 == s.SHA256:
		c.Manifest = "matches"
	default:
		c.Manifest = fmt.Sprintf("differs from its manifest (sha256 %s there)", want.SHA256)
	}
	return c, m, nil
}
