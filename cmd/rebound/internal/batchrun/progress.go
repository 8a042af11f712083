package batchrun

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// progressPrinter shows a run's progress on stderr, and what the run is
// waiting for: a bar redrawn in place on a terminal, else lines.
type progressPrinter struct {
	w        io.Writer
	terminal bool
	every    time.Duration
	waits    *waits // nil: nothing known of them

	mu      sync.Mutex // guards last and set
	last    batch.Progress
	started bool // last holds the run's progress

	printedKey string    // what the last line said, but the times
	printedAt  time.Time // when
}

// ProgressEvery is how often a run's progress is looked at when stderr is
// not a terminal: a line is printed then if what it says has changed, and
// every progressQuiet if not.
var ProgressEvery = time.Second

// progressQuiet is the longest a run goes without a progress line when
// stderr is not a terminal.
const progressQuiet = 5 * time.Second

// newProgressPrinter returns a printer on stderr, a terminal or not, that
// says what the run waits for as w tells.
func newProgressPrinter(stderr io.Writer, terminal bool, w *waits) *progressPrinter {
	p := &progressPrinter{w: stderr, every: ProgressEvery, waits: w}
	if terminal {
		p.terminal, p.every = true, 200*time.Millisecond
	}
	return p
}

func (p *progressPrinter) set(pr batch.Progress) {
	p.mu.Lock()
	p.last, p.started = pr, true
	p.mu.Unlock()
}

// start prints until the returned function is called, which prints the
// last state once more and returns when printing has stopped.
func (p *progressPrinter) start() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	begun := time.Now()
	wg.Go(func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.print(begun, false)
			case <-done:
				p.print(begun, true)
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// print prints the progress of a run begun at begun; final ends a
// terminal's line.
func (p *progressPrinter) print(begun time.Time, final bool) {
	p.mu.Lock()
	pr, started := p.last, p.started
	p.mu.Unlock()
	if !started || !p.terminal && final {
		return // nothing known yet; or the summary follows
	}
	now := time.Now()
	finished := pr.Finished()
	rate := perSecond(finished, now.Sub(begun))
	eta := "?"
	if rate > 0 && pr.Todo >= finished {
		eta = time.Duration(float64(time.Second) * float64(pr.Todo-finished) / rate).Round(time.Second).String()
	}
	w := p.waits.at(now, pr.InFlight)
	counts := fmt.Sprintf("%d/%d done, %d failed, %d retrying", pr.Succeeded, pr.Todo, pr.Failed+pr.FailedPermanent, w.retrying())
	line := fmt.Sprintf("%s, %.0f/s, ETA %s%s", counts, rate, eta, w.text())
	if !p.terminal {
		key := counts + w.key()
		if key == p.printedKey && now.Sub(p.printedAt) < progressQuiet {
			return
		}
		p.printedKey, p.printedAt = key, now
		fmt.Fprintf(p.w, "rebound batch: %s\n", line)
		return
	}
	const width = 30
	filled := 0
	if pr.Todo > 0 {
		filled = min(width, width*finished/pr.Todo)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r[%s%s] %s\033[K%s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), line, end)
}
