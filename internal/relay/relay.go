// Package relay carries a call's HTTP traffic between the caller and the
// provider, beneath rebound.Transport: it keeps a request's body to send it
// again, proves an attempt never reached the server, reads a failed
// response's body to be judged, looks into an event stream up to its first
// content, and hands a stream over whole events at a time under its guards
// (stall, rate), continuing a text answer cut after content.
//
// It knows nothing of the retry protocol. The engine's report is handed in:
// a stream tells the call how it ended through its Reporter (which holds
// the breaker's permit), and makes the errors its reader sees through
// constructors (Errors), so that the public error types stay the root
// package's.
package relay

import (
	"github.com/rebound-go/rebound/internal/scrub"
)

// Reason is how a stream handed over ended before its answer was whole:
// rebound.IncompleteReason, value for value.
type Reason uint8

// Reasons.
const (
	Cut        Reason = iota + 1 // the stream broke mid-answer
	Stalled                      // it sent nothing for its stall bound
	TooSlow                      // it sent content slower than its floor
	NoEnd                        // it ended cleanly without its end marker
	ErrorEvent                   // it ended on an in-band error
	NotText                      // its continuation answered with other than text
)

// End is how a stream handed over ended, as the call's breaker hears it.
type End uint8

// Ends.
const (
	Whole   End = iota // the answer came whole: a success
	Broken             // the stream broke or was cut: a failure
	Dropped            // the caller closed it early: nothing learned
)

// Errors makes the errors a stream hands its reader, and reads back the
// ones it made.
type Errors struct {
	// Incomplete is the error of a stream that ended before its answer
	// was whole, after events content events carrying text bytes of text;
	// err is what broke it, if anything did.
	Incomplete func(r Reason, events, text int, err error) error
	// Reason reads back an error Incomplete made, wrapped or not: its
	// reason and the error it carries.
	Reason func(err error) (r Reason, inner error, ok bool)
	// Event is the error of an in-band error event named name, whose
	// data is to be scrubbed of secrets.
	Event func(name string, data []byte, secrets scrub.Secrets) error
	// Redact is err with secrets scrubbed from its message, still
	// reaching err.
	Redact func(err error, secrets scrub.Secrets) error
}

func nothing() {}
