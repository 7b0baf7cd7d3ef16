// Package seccomp holds the box's system call policy and loads it.
//
// The policy is data: [Policy] is an allow-list with the reason beside
// each call. Everything not in it fails with EPERM, except clone3, which
// fails with ENOSYS so that glibc falls back to clone (numpy's OpenBLAS
// threads do), and calls newer than the policy (numbers above
// [LastKnownCall]), which fail with ENOSYS as on an older kernel, so that
// programs fall back to the calls they replaced. A call made through a
// foreign ABI (i386 int 0x80, x32, or a foreign architecture) kills the
// process.
//
// The table is compiled to classic BPF at build time by ./gen (cgo,
// libseccomp, with a few instructions of its own in front for the calls
// newer than the policy) for amd64 and arm64; the programs are committed beside this
// file and embedded. [Load] installs the one for the running architecture
// with seccomp(2) in pure Go, so the guest binary stays CGO_ENABLED=0.
// After changing the table, run `go generate ./guest/seccomp`: a test in
// ./gen fails while the committed programs differ from the table.
package seccomp
