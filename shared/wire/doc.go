// Package wire defines the messages that travel in frames between the host
// and the guest agent, the run request and the receipt the guest writes.
//
// It is the contract between host/ and guest/: versioned by
// [ProtocolVersion] (checked in the hello handshake) and by
// [ReceiptSchemaVersion] (stamped into every receipt), and it imports only
// the standard library. Both sides check every bound in [Limits] again:
// the host may be another version than the guest, and the guest is not
// trusted once user code has run in it.
//
// Every frame's body is read by [DecodeStrict], PyBox's one strict JSON
// reader, which the MCP server uses for its tool's arguments too. A run
// frame carries what the supervisor needs to route it in a header of its
// own ([RunHeader]), so that the supervisor never reads a run's body.
package wire
