package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// A retirement ends the handlers of servers a reload removed or changed.
// A handler with a Shutdown method (as http.Server has: refuse new work,
// finish what is in flight until its context is done, then close) is
// shut down within the grace CloseReplaced gives; another is closed at
// once. end cuts every grace short and waits for the handlers to close.
type retirement struct {
	mu    sync.Mutex
	stops []context.CancelFunc
	wg    sync.WaitGroup
}

// shutdowner is a handler that can finish its calls before it closes.
type shutdowner interface {
	Shutdown(ctx context.Context) error
}

func (r *retirement) retire(hs []http.Handler, grace time.Duration) {
	if len(hs) == 0 {
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), grace)
	r.mu.Lock()
	r.stops = append(r.stops, stop)
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer stop()
		var each sync.WaitGroup
		for _, h := range hs {
			each.Go(func() {
				if sd, ok := h.(shutdowner); ok {
					sd.Shutdown(ctx)
				} else if c, ok := h.(io.Closer); ok {
					c.Close()
				}
			})
		}
		each.Wait()
	}()
}

// end cuts every grace short and waits until every handler retired is
// closed.
func (r *retirement) end() {
	r.mu.Lock()
	for _, stop := range r.stops {
		stop()
	}
	r.stops = nil
	r.mu.Unlock()
	r.wg.Wait()
}
