package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/batch"
)

// A run of three requests in the OpenAI Batch API's format, against a
// provider that is busy once and refuses a request it cannot read: the
// busy answer is retried, the refusal is not, and the output and errors
// are written in the Batch API's format, in input order.
//
// The journal here keeps the run in memory, which is enough for a run that
// is never resumed; reboundbolt keeps one in a file and reboundpg in
// PostgreSQL, so that a run that stops resumes without sending again what
// succeeded.
func ExampleRunner() {
	var mu sync.Mutex
	busy := true
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string }
		}
		if json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"no messages","type":"invalid_request_error"}}`)
			return
		}
		mu.Lock()
		wasBusy := busy
		busy = false
		mu.Unlock()
		if wasBusy {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"answer":%q}`, strings.ToUpper(req.Messages[0].Content))
	}))
	defer provider.Close()

	input := `{"custom_id":"greet","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hello"}]}}
{"custom_id":"name","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"world"}]}}
{"custom_id":"empty","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}
`
	f, err := batch.Read(strings.NewReader(input))
	if err != nil {
		fmt.Println(err)
		return
	}
	runner := &batch.Runner{
		BaseURL:     provider.URL,
		Concurrency: 1,
		Policy:      rebound.Policy{BaseDelay: time.Millisecond},
	}
	journal := &runJournal{}
	sum, err := runner.Run(context.Background(), f, journal)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d sent in %d attempts: %d succeeded, %d failed for good\n", sum.Sent, sum.Attempts, sum.Succeeded, sum.FailedPermanent)
	if _, err := batch.WriteOutput(context.Background(), journal, os.Stdout, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 3 sent in 4 attempts: 2 succeeded, 1 failed for good
	// {"id":"batch_req_231bf89d726826891c1578a8","custom_id":"greet","response":{"status_code":200,"request_id":"","body":{"answer":"HELLO"}},"error":null}
	// {"id":"batch_req_82a3537ff0dbce7eec35d69e","custom_id":"name","response":{"status_code":200,"request_id":"","body":{"answer":"WORLD"}},"error":null}
	// {"id":"batch_req_2e1cfa82b035c26cbbbdae63","custom_id":"empty","response":{"status_code":400,"request_id":"","body":{"error":{"message":"no messages","type":"invalid_request_error"}}},"error":{"code":"permanent","message":"http 400 Bad Request: {\"error\":{\"message\":\"no messages\",\"type\":\"invalid_request_error\"}}"}}
}

// runJournal is a batch.Journal that keeps one run in memory: it is never
// resumed, and so never hands out a claim twice.
type runJournal struct {
	mu       sync.Mutex // guards the fields below
	ids      []string
	states   map[string]batch.State
	outcomes map[string]batch.Outcome
}

func (j *runJournal) Prepare(_ context.Context, in batch.Input, _ batch.Options) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ids = in.IDs
	j.states = make(map[string]batch.State, len(in.IDs))
	j.outcomes = make(map[string]batch.Outcome, len(in.IDs))
	return nil
}

// Claim hands out the Pending items in input order.
func (j *runJournal) Claim(_ context.Context, n int) ([]batch.Claim, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var claims []batch.Claim
	for _, id := range j.ids {
		if len(claims) == n {
			break
		}
		if j.states[id] == batch.Pending {
			j.states[id] = batch.InFlight
			claims = append(claims, batch.Claim{ID: id})
		}
	}
	return claims, nil
}

// Record keeps each outcome, the first success standing; a Pending one
// gives its claim back.
func (j *runJournal) Record(_ context.Context, outcomes []batch.Outcome) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, o := range outcomes {
		if j.states[o.ID] == batch.Succeeded {
			continue
		}
		j.states[o.ID] = o.State
		if o.State != batch.Pending {
			j.outcomes[o.ID] = o
		}
	}
	return nil
}

func (j *runJournal) Outcomes(_ context.Context, fn func(batch.Outcome) error) error {
	j.mu.Lock()
	var outcomes []batch.Outcome
	for _, id := range j.ids {
		if o, ok := j.outcomes[id]; ok {
			outcomes = append(outcomes, o)
		}
	}
	j.mu.Unlock()
	for _, o := range outcomes {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (j *runJournal) Counts(context.Context) (batch.Counts, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := batch.Counts{Total: len(j.ids)}
	for _, id := range j.ids {
		switch j.states[id] {
		case batch.Pending:
			c.Pending++
		case batch.InFlight:
			c.InFlight++
		case batch.Succeeded:
			c.Succeeded++
		case batch.Failed:
			c.Failed++
		case batch.FailedPermanent:
			c.FailedPermanent++
		}
	}
	return c, nil
}

func (j *runJournal) Close() error { return nil }
