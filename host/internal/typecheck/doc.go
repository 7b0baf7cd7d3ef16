// Package typecheck type-checks Go packages as the compiler would see them
// on another system, from this one. It asks `go list` which files
// GOOS/GOARCH pick, parses them and checks them with go/types.
//
// Cgo is taken leniently (go/types' FakeImportC): every C.name is accepted
// unchecked, so a package that calls Objective-C through cgo — the
// Virtualization.framework binding github.com/Code-Hex/vz — is still
// checked in all of its Go, and every Go call into it must match its API.
// What cannot be checked here: the C side, linking, and running.
//
// Dependencies (the standard library for that system included) are checked
// for their declarations only; the packages the patterns name are checked
// in full, function bodies and unused variables and imports included.
package typecheck
