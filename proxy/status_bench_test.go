package proxy

import (
	"testing"

	"github.com/rebound-go/rebound"
)

// BenchmarkStatusNote: what the status page costs each call: its row
// counting an attempt that answered, the event that ends a call.
func BenchmarkStatusNote(b *testing.B) {
	b.ReportAllocs()
	r := newStatusBoard().row("upstream:model")
	e := rebound.Event{Type: rebound.EventAttempt, Attempt: 1}
	for b.Loop() {
		r.note(e, false, "default")
	}
}
