package batchrun

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// lines is an io.Writer that keeps what is written, for a printer that
// writes from a goroutine of its own.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProgressLinesWithoutTerminal: without a terminal, a run whose state
// does not change for 9 s still prints more than one line, and the lines
// come at least every progressQuiet.
func TestProgressLinesWithoutTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lines
		p := newProgressPrinter(&out, false, nil)
		p.set(batch.Progress{Todo: 1, InFlight: 1})
		stop := p.start()
		time.Sleep(9 * time.Second)
		stop()
		got := strings.Count(out.String(), "\n")
		if got < 2 || got > 9 {
			t.Errorf("9 s without a change: %d lines, want from 2 to 9:\n%s", got, out.String())
		}
		if !strings.Contains(out.String(), "0/1 done") {
			t.Errorf("no progress line:\n%s", out.String())
		}
	})
}
