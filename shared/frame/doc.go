// Package frame reads and writes the length-prefixed frames that carry
// every message between the host and the guest agent.
//
// A frame is a 4-byte big-endian payload length followed by the payload.
// Lengths above [Max] are refused before anything is allocated for them:
// the guest is the less trusted side of the channel once user code has run
// in it, and a hostile length must cost the reader nothing.
//
// This package is part of the contract between host/ and guest/ and
// imports only the standard library.
package frame
