// Package cost counts what an agent's calls cost, attempt by attempt, and
// the figure that matters: the cost per successful task.
//
// Cost per call misleads. A strategy that retries every 400 three times
// pays for four calls that produce nothing, and a strategy that falls back
// to a cheaper model pays less per call and succeeds more often. So a Task
// is every attempt one piece of work made, on whatever target, with the
// tokens each reported (see Report); a Table prices them; and
// a Ledger adds up many tasks: spend, the share of it wasted on attempts
// that produced nothing, success rate and cost per successful task.
package cost

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
)

// Price is what a target charges, in US dollars per million tokens, and,
// for spend caps, what its requests may use when they do not say. Its
// JSON form (rebound proxy's "prices") has snake_case keys:
// {"input_per_million": 3, "output_per_million": 15,
// "cache_read_per_million": 0.3, "cache_write_per_million": 3.75}.
//
// A provider bills input it has cached apart from input read afresh
// (Usage): Anthropic a cache read at a tenth of the input price and a
// write at 1.25 times it (twice it for an hour's), OpenAI and Gemini a
// read at a half to a tenth, and no write. A cache price left zero is
// never below what a provider charges, so that a cap holds before the
// operator fills it in: a read at the input price, a write at twice it.
type Price struct {
	// InputPerMillion is the price of input read afresh.
	InputPerMillion float64 `json:"input_per_million"`
	// OutputPerMillion is the price of output, thoughts included.
	OutputPerMillion float64 `json:"output_per_million"`
	// CacheReadPerMillion is the price of input read from the provider's
	// prompt cache. Zero means InputPerMillion.
	CacheReadPerMillion float64 `json:"cache_read_per_million"`
	// CacheWritePerMillion is the price of input written into the cache
	// (for five minutes, Anthropic's default). Zero means twice
	// InputPerMillion.
	CacheWritePerMillion float64 `json:"cache_write_per_million"`
	// CacheWrite1hPerMillion is the price of input written into the cache
	// for an hour. Zero means twice InputPerMillion, or
	// CacheWritePerMillion if that is more.
	CacheWrite1hPerMillion float64 `json:"cache_write_1h_per_million"`
	// MaxOutputTokens is what a request that names no output cap of its
	// own is held at, for each answer it asks for (a provider's default
	// is the model's maximum: set it to that, 100 000 for OpenAI's
	// o-series, whose reasoning counts as output), and what a Gemini
	// request that sets no thinking budget is held at for its thoughts,
	// beyond its cap. Zero means 32 768.
	MaxOutputTokens int64 `json:"max_output_tokens"`
	// MaxInputTokens is what the input of a request that refers to
	// context the provider keeps is held at, beyond its own body: the
	// model's context window. Such a request continues a stored
	// conversation (previous_response_id, conversation, an
	// item_reference), uses a stored prompt or Gemini's cachedContent,
	// sends a document or a file, by id, URI or inline (a provider bills
	// a PDF's pages as text and images), or offers tools the provider
	// runs (web search, file search, code execution, MCP servers, a
	// container). Zero means the largest window
	// the request's dialect serves: 2 097 152 for Gemini's paths,
	// 1 047 576 for OpenAI's, 1 000 000 for Anthropic's (its 1M-token
	// beta), 2 097 152 for any other. A server with a larger window (an
	// OpenAI-compatible one with a 2M-token model) needs it set.
	MaxInputTokens int64 `json:"max_input_tokens"`
}

func (p Price) maxOutput() int64 {
	if p.MaxOutputTokens > 0 {
		return p.MaxOutputTokens
	}
	return defaultMaxOutput
}

func (p Price) maxInput(d dialect) int64 {
	if p.MaxInputTokens > 0 {
		return p.MaxInputTokens
	}
	return d.window()
}

// cacheRead, cacheWrite and cacheWrite1h are p's cache prices, their
// defaults filled in.
func (p Price) cacheRead() float64 { return cmp.Or(p.CacheReadPerMillion, p.InputPerMillion) }

func (p Price) cacheWrite() float64 { return cmp.Or(p.CacheWritePerMillion, 2*p.InputPerMillion) }

func (p Price) cacheWrite1h() float64 {
	return cmp.Or(p.CacheWrite1hPerMillion, max(2*p.InputPerMillion, p.cacheWrite()))
}

// dearestInput is the most p charges a token of input in dialect d: a
// dialect whose provider bills no cache write (OpenAI's, Gemini's) is
// held at its input or read price, any other at the dearest of all.
func (p Price) dearestInput(d dialect) float64 {
	most := max(p.InputPerMillion, p.cacheRead())
	if d != dialectOpenAI && d != dialectGemini {
		most = max(most, p.cacheWrite(), p.cacheWrite1h())
	}
	return most
}

// Of returns the price of u.
func (p Price) Of(u Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMillion +
		float64(u.CacheReadTokens)*p.cacheRead() +
		float64(u.CacheWriteTokens)*p.cacheWrite() +
		float64(u.CacheWrite1hTokens)*p.cacheWrite1h() +
		float64(u.OutputTokens)*p.OutputPerMillion) / 1e6
}

// MaxPerMillion is the most any price per million tokens may be: what a
// price table checked with Validate keeps to.
const MaxPerMillion = 1e6

// Validate reports a price that is negative, not a number, or above
// MaxPerMillion, or a token count that is negative, in one line.
func (p Price) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"input_per_million", p.InputPerMillion}, {"output_per_million", p.OutputPerMillion},
		{"cache_read_per_million", p.CacheReadPerMillion}, {"cache_write_per_million", p.CacheWritePerMillion},
		{"cache_write_1h_per_million", p.CacheWrite1hPerMillion},
	} {
		if !(f.v >= 0 && f.v <= MaxPerMillion) {
			return fmt.Errorf("%s is %v: a price per million tokens is from 0 to %g US dollars", f.name, f.v, float64(MaxPerMillion))
		}
	}
	if p.MaxOutputTokens < 0 || p.MaxInputTokens < 0 {
		return errors.New("a token count is negative")
	}
	return nil
}

// Table prices targets by name.
type Table map[string]Price

// Attempt is one attempt of a task.
type Attempt struct {
	Target string
	Usage  Usage
	// Answered is set for the attempt that produced the task's answer; the
	// cost of every other attempt is waste.
	Answered bool
}

// Task is one piece of work: its attempts, and whether it succeeded.
type Task struct {
	Attempts  []Attempt
	Succeeded bool
}

// Spend returns what the task cost under t, and how much of that went on
// attempts that produced nothing. A target missing from t costs nothing.
func (t Table) Spend(task Task) (spent, wasted float64) {
	for _, a := range task.Attempts {
		c := t[a.Target].Of(a.Usage)
		spent += c
		if !a.Answered {
			wasted += c
		}
	}
	return spent, wasted
}

// Ledger adds up tasks under a price table. It is safe for concurrent use.
type Ledger struct {
	Prices Table

	mu        sync.Mutex // guards the fields below
	tasks     int
	succeeded int
	attempts  int
	spent     float64
	wasted    float64
}

// Add records one task.
func (l *Ledger) Add(t Task) {
	spent, wasted := l.Prices.Spend(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tasks++
	if t.Succeeded {
		l.succeeded++
	}
	l.attempts += len(t.Attempts)
	l.spent += spent
	l.wasted += wasted
}

// Summary is a Ledger's totals.
type Summary struct {
	Tasks, Succeeded, Attempts int
	// Spent and Wasted are in US dollars; Wasted is the part of Spent paid
	// for attempts that produced nothing.
	Spent, Wasted float64
}

// Summary returns the totals so far.
func (l *Ledger) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Summary{Tasks: l.tasks, Succeeded: l.succeeded, Attempts: l.attempts, Spent: l.spent, Wasted: l.wasted}
}

// WastedShare is Wasted as a fraction of Spent (0 when nothing was spent).
func (s Summary) WastedShare() float64 {
	if s.Spent == 0 {
		return 0
	}
	return s.Wasted / s.Spent
}

// SuccessRate is the fraction of tasks that succeeded.
func (s Summary) SuccessRate() float64 {
	if s.Tasks == 0 {
		return 0
	}
	return float64(s.Succeeded) / float64(s.Tasks)
}

// CostPerSuccess is Spent divided by the tasks that succeeded: what one
// useful result really cost.
func (s Summary) CostPerSuccess() float64 {
	if s.Succeeded == 0 {
		return 0
	}
	return s.Spent / float64(s.Succeeded)
}

func (s Summary) String() string {
	return fmt.Sprintf("%d tasks, %.1f%% succeeded, %d attempts, $%.2f spent, %.1f%% wasted, $%.4f per success",
		s.Tasks, 100*s.SuccessRate(), s.Attempts, s.Spent, 100*s.WastedShare(), s.CostPerSuccess())
}
