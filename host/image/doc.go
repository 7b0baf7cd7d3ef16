// Package image builds, stores and hands out the read-only images PyBox
// runs Python from.
//
// An image is an erofs file (lz4hc) holding a Debian root filesystem with
// python3, built from a [Recipe] with mmdebstrap from one Debian suite
// (trixie by default, or bookworm), whose apt sources the builder writes
// itself (see aptSources). Its digest is the sha256 of the file. The
// built-in recipes (stdlib, data) are data in recipes/SUITE/*.json; user
// images start from another image, and its suite, and add apt packages,
// pure-Python wheels and local files.
//
// Each image is built for one architecture (x86_64 or arm64, see
// archs.All): this machine's, or another through qemu-user (see emulation).
// Its meta.json records it; the store keeps the same name's images of
// different architectures apart, and every lookup names the
// architecture it wants.
//
// Layout:
//
//	$PYBOX_HOME/images/NAME/{image.erofs,meta.json}        the store: x86_64 images
//	$PYBOX_HOME/images/NAME@ARCH/{image.erofs,meta.json}   the store: other architectures' (see dirName)
//	$PYBOX_CACHE/images/KEY/{image.erofs,meta.json}        built images by recipe key
//	$PYBOX_CACHE/images/debs/                          downloaded .deb files
//	$PYBOX_CACHE/images/work/                          trees being built
//
// A build runs under one lock per cache, in a work directory, and reaches
// the store only when complete: a failed or interrupted build leaves
// nothing in the store. The same recipe (same base digest, suite, apt
// list, wheels, added files, apt sources and builder version) is a cache
// hit.
//
// Every image carries matplotlib's font cache (when it has matplotlib) in
// /usr/share/pybox/mplconfig, the list of files a first run reads in
// [WarmList], for the guest to read once at VM start, and its Python
// version and suite in wire.ImageAboutFile, for receipts.
//
// The VM start calls [Resolve] with its guest's architecture, which
// checks names, finds that architecture's files and verifies each
// image's digest and erofs superblock ([VerifyFile]).
package image
