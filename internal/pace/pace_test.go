package pace

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/header"
)

func TestPerMinute(t *testing.T) {
	for _, c := range []struct {
		name string
		got  Pace
		want Pace
	}{
		{"600 requests", Requests(600, time.Minute), Pace{Rate: 590.0 / 60, Burst: 10}},
		{"600 requests over 60.5 s", Requests(600, time.Minute+time.Second/2), Pace{Rate: 590 / 60.5, Burst: 10}},
		{"no limit", Requests(0, time.Minute), Pace{}},
		{"a negative limit", Tokens(-5, 10, time.Minute), Pace{}},
		{"one a minute", Requests(1, time.Minute), Pace{Rate: 1.0 / 60, Burst: 1}},
		{"60 000 tokens", Tokens(60000, 0, time.Minute), Pace{Rate: 50000.0 / 60, Burst: 10000}},
		{"a burst set", Tokens(60000, 600, time.Minute), Pace{Rate: 59400.0 / 60, Burst: 600}},
		{"a burst beyond half", Tokens(60000, 1e9, time.Minute), Pace{Rate: 30000.0 / 60, Burst: 30000}},
	} {
		if c.got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
}

func TestLearned(t *testing.T) {
	configured := Requests(600, time.Minute)
	quota := func(remaining int64, reset time.Duration) header.Quota {
		return header.Quota{Limit: -1, Remaining: remaining, Reset: reset, HasReset: reset > 0}
	}
	for _, c := range []struct {
		name       string
		q          header.Quota
		configured Pace
		want       Pace
		ok         bool
	}{
		{"nothing said", quota(-1, 0), configured, Pace{}, false},
		{"no reset", quota(5, 0), configured, Pace{}, false},
		{"nothing left", quota(0, time.Second), configured, Pace{}, true},
		{"plenty left", quota(590, time.Second), configured, configured, true},
		{"little left", quota(30, time.Minute), configured, Pace{Rate: 0.5, Burst: 10}, true},
		{"no limit configured", quota(30, time.Minute), Pace{}, Pace{Rate: 0.5, Burst: 30}, true},
	} {
		got, ok := Learned(c.q, c.configured)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
