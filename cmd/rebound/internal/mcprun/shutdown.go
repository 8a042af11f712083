package mcprun

import (
	"context"
	"net/http"
)

// calls counts a Handler's requests in flight that carry a message (its
// POSTs), for Shutdown: an event stream (a GET) may stay open for hours,
// and is not waited for.
type calls struct {
	n       int
	drained chan struct{} // made by Shutdown; closed when n is 0
}

// begin notes that r is in flight; the func it returns notes its end.
func (h *Handler) begin(r *http.Request) func() {
	if r.Method != http.MethodPost {
		return func() {}
	}
	h.mu.Lock()
	h.inFlight.n++
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.inFlight.n--; h.inFlight.n == 0 && h.inFlight.drained != nil {
			close(h.inFlight.drained)
			h.inFlight.drained = nil
		}
	}
}

// Shutdown ends the Handler gracefully: it refuses new sessions at once,
// waits until every POST in flight has been answered (a tool call to its
// end) or ctx is done, then closes it as Close does. rebound proxy calls
// it for a server a reload removed or changed: the calls it was making
// finish, and the clients of its sessions, told by a 404 that their
// session is gone, open one with the server the config has now.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	var drained chan struct{}
	if h.inFlight.n > 0 {
		if h.inFlight.drained == nil {
			h.inFlight.drained = make(chan struct{})
		}
		drained = h.inFlight.drained
	}
	h.mu.Unlock()
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
		}
	}
	return h.Close()
}
