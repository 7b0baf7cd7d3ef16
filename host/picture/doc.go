// Package picture tells whether a file is a well-formed PNG, JPEG, GIF or
// WebP image small enough to show to a model, before `pybox mcp` hands it
// to a client as image content.
//
// The format is decided from the file's first bytes, never from its name.
// A model's API refuses a malformed or oversized image, and some clients
// then cannot continue the conversation at all, so [Check] accepts only
// bytes whose whole structure holds together: every chunk, segment or
// block in place and within the file, nothing cut short and nothing after
// the end marker, and dimensions from the header within a bound.
//
// Pixels are never decoded into memory: the bytes come from a program in
// the box, and a few kilobytes can claim a picture of gigabytes. The
// dimensions are checked first; only then is a PNG's compressed data
// inflated, into nothing, to check that it holds exactly the rows the
// header promises, which bounds that work by the dimensions.
package picture
