package proxy

import (
	"time"

	"github.com/rebound-go/rebound/internal/window"
)

// chartMinutes is how many minutes the status page's chart of a row
// shows: enough to see when trouble began, not so many that a row's ring
// weighs more than its window.
const chartMinutes = 30

// minuteCounts are a row's calls in one minute: those that ended in it,
// the attempts after a call's first that ended in it, and the calls
// given up in it.
type minuteCounts struct{ calls, retries, gaveUp int64 }

// minuteBucket is a minute of a row's chart: slot
// window.Slot(epoch, chartMinutes) of its ring holds the latest minute
// of that slot, and a slot of a minute past the chart is stale.
type minuteBucket struct {
	epoch int64 // minutes since the Unix epoch
	minuteCounts
}

// minute returns the chart's bucket of now, emptied if it held an older
// minute. r.mu is held.
func (r *statusRow) minute(now time.Time) *minuteCounts {
	epoch := window.Epoch(now, int64(time.Minute))
	b := &r.minutes[window.Slot(epoch, chartMinutes)]
	if b.epoch != epoch {
		*b = minuteBucket{epoch: epoch}
	}
	return &b.minuteCounts
}

// chart returns the counts of the chartMinutes minutes up to and with
// now's, oldest first: zero for a minute the ring holds nothing of.
// r.mu is held.
func (r *statusRow) chart(now time.Time) [chartMinutes]minuteCounts {
	var out [chartMinutes]minuteCounts
	last := window.Epoch(now, int64(time.Minute))
	for i := range out {
		epoch := last - chartMinutes + 1 + int64(i)
		if b := &r.minutes[window.Slot(epoch, chartMinutes)]; b.epoch == epoch {
			out[i] = b.minuteCounts
		}
	}
	return out
}

// minuteJSON is a minute of a row's chart in /ui/status.
type minuteJSON struct {
	Minute  time.Time `json:"minute"` // when it began, UTC
	Calls   int64     `json:"calls"`
	Retries int64     `json:"retries"`
	GaveUp  int64     `json:"gave_up"`
}

// perMinute returns the JSON of counts, the chartMinutes minutes up to
// and with now's, oldest first.
func perMinute(now time.Time, counts [chartMinutes]minuteCounts) []minuteJSON {
	start := now.UTC().Truncate(time.Minute).Add(-(chartMinutes - 1) * time.Minute)
	out := make([]minuteJSON, chartMinutes)
	for i, c := range counts {
		out[i] = minuteJSON{Minute: start.Add(time.Duration(i) * time.Minute), Calls: c.calls, Retries: c.retries, GaveUp: c.gaveUp}
	}
	return out
}
