package batchrun

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// progressPrinter shows a run's progress on stderr: a bar redrawn in place
// on a terminal, else a line every few seconds.
type progressPrinter struct {
	w        io.Writer
	terminal bool
	every    time.Duration

	mu   sync.Mutex // guards last
	last batch.Progress
}

// ProgressEvery is how often a run's progress is printed when stderr
// is not a terminal.
var ProgressEvery = 5 * time.Second

// newProgressPrinter returns a printer on stderr, a terminal or not.
func newProgressPrinter(stderr io.Writer, terminal bool) *progressPrinter {
	p := &progressPrinter{w: stderr, every: ProgressEvery}
	if terminal {
		p.terminal, p.every = true, 200*time.Millisecond
	}
	return p
}

func (p *progressPrinter) set(pr batch.Progress) {
	p.mu.Lock()
	p.last = pr
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
				p.print(time.Since(begun), false)
			case <-done:
				p.print(time.Since(begun), true)
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// print prints the progress after elapsed; final ends a terminal's line.
func (p *progressPrinter) print(elapsed time.Duration, final bool) {
	p.mu.Lock()
	pr := p.last
	p.mu.Unlock()
	if !p.terminal && final {
		return // the summary follows
	}
	finished := pr.Finished()
	rate := perSecond(finished, elapsed)
	eta := "?"
	if rate > 0 && pr.Todo >= finished {
		eta = time.Duration(float64(time.Second) * float64(pr.Todo-finished) / rate).Round(time.Second).String()
	}
	line := fmt.Sprintf("%d/%d done, %d failed, %d retrying, %.0f/s, ETA %s", pr.Succeeded, pr.Todo, pr.Failed+pr.FailedPermanent, pr.Retrying, rate, eta)
	if !p.terminal {
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
