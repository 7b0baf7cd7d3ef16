// Package egress holds the host's decisions about a box's connections to
// the network, and the strict readers of the bytes a box sends to ask for
// one.
//
// The VM has no network device, and a box no network. This package is
// the host's side of opening it narrowly, which no command offers yet:
// the user (never the agent) names the hosts a box may reach, a box's
// connections leave through the host↔guest channel to the host process
// that made the run, and that process decides:
//
//   - [ParseAllow] reads the user's list into an [Allow]: DNS names,
//     *.DOMAIN for every subdomain of DOMAIN, and IP literals, each with
//     its ports (443 and 80 when none is given). [Allow.Allows] says
//     whether a host and port the box named is on it; [Allow.Narrow] lets
//     one call ask for fewer of them, never more.
//   - [Resolve] resolves an allowed name on the host and keeps only the
//     addresses [CheckAddress] accepts: a name on the list that resolves
//     to loopback, a private network, a link-local or cloud metadata
//     address (DNS rebinding, or a name the box's owner does not control)
//     reaches none of them unless the user named that very address. The
//     caller dials the addresses Resolve returned, and never resolves the
//     name again.
//   - [ReadRequestHead] reads the proxy request a box sends: CONNECT
//     host:port for TLS, or an absolute-form http:// request for plain
//     HTTP, which [Head.OriginForm] rewrites for the upstream server.
//   - [ReadClientHello] reads the TLS ClientHello a box sends through a
//     CONNECT tunnel, whole and unchanged, and its server name: HTTPS stays
//     end to end (the host never holds a key), so the caller checks that
//     the name is on the list and is the host of the CONNECT. A hello with
//     no name ([ErrNoSNI]) or with an encrypted one ([ErrECH]) cannot be
//     checked; the caller refuses it, except perhaps for a CONNECT to an IP
//     literal the user named, for which clients send no name.
//
// Everything a box sends is hostile: every reader here bounds what it
// reads before it reads it, refuses what a well-behaved client never
// sends rather than guessing, and reads nothing past what it was asked
// for, so that the bytes after a request's head or a ClientHello stay for
// the relay. Names and addresses come out in one canonical form
// (lower-case, no trailing dot, IPv6 without brackets), so that two of
// them are the same host exactly when the strings are equal.
//
// A [Gate] puts these together for one call: it serves each connection
// a box opens (read the head, check the list, resolve, read and check the
// TLS hello before anything is dialled, dial, relay), within the call's
// [Limits] on connections, bytes and time, closes them all when the call
// ends, and keeps a [Record] of each, served or refused, for the
// receipt. Where the connections come from (the guest channel) is the
// caller's: a Gate serves any io.ReadWriteCloser. Besides the standard
// library it imports only shared/wire (a Record is the receipt's entry):
// international names are given in their xn-- (punycode) form.
package egress
