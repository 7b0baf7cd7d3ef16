// Package image builds, stores and hands out the read-only images PyBox
// runs Python from.
//
// An image is an erofs file (lz4hc) holding a Debian root filesystem with
// python3, built from a [Recipe] with mmdebstrap and the distribution's
// archive as this machine is configured. Its digest is the sha256 of the
// file. The built-in recipes (stdlib, data) are data in recipes/*.json;
// user images start from another image and add apt packages, pure-Python
// wheels and local files.
//
// Layout:
//
//	$PYBOX_HOME/images/NAME/{image.erofs,meta.json}    the store
//	$PYBOX_CACHE/images/KEY/{image.erofs,meta.json}    built images by recipe key
//	$PYBOX_CACHE/images/debs/                          downloaded .deb files
//	$PYBOX_CACHE/images/work/                          trees being built
//
// A build runs under one lock per cache, in a work directory, and reaches
// the store only when complete: a failed or interrupted build leaves
// nothing in the store. The same recipe (same base digest, apt list,
// wheels, added files, archive configuration and builder version) is a
// cache hit.
//
// Every image carries matplotlib's font cache (when it has matplotlib) in
// /usr/share/pybox/mplconfig and the list of files a first run reads in
// [WarmList], for the guest to read once at VM start.
//
// The VM start calls [Resolve], which checks names, finds the files and
// verifies each image's digest and erofs superblock ([VerifyFile]).
package image
