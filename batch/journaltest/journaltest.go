// Package journaltest checks that a batch.Journal keeps the contract that
// rebound batch relies on: items handed out once, outcomes that survive the
// journal being closed and opened again and the item being claimed again,
// a run that stopped resumed without sending again what succeeded, and an
// input that is not the journal's refused. Each journal's own tests call Run with a way to open it.
package journaltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/batch"
)

// Opener opens a new Journal value (one run's) over one place where a
// journal is kept: every call sees what the calls before it stored.
type Opener func() (batch.Journal, error)

// Run runs the contract's tests as subtests of t. fresh returns an Opener
// over a new, empty place (a file, a schema, ...) that it removes when its
// test ends.
func Run(t *testing.T, fresh func(t *testing.T) Opener) {
	tests := []struct {
		name string
		test func(*testing.T, Opener)
	}{
		{"PrepareFillsAnEmptyJournal", testPrepare},
		{"ClaimsInInputOrder", testClaimOrder},
		{"ClaimsEachItemOnce", testClaimOnce},
		{"RecordsWhatCame", testRecord},
		{"ARunEnds", testRunEnds},
		{"ResumesWhereARunStopped", testResume},
		{"KeepsTheLastOutcome", testLastOutcome},
		{"RetryFailedSendsPermanentFailuresAgain", testRetryFailed},
		{"CloseGivesBackClaims", testCloseGivesBack},
		{"FirstSuccessStands", testFirstSuccess},
		{"RecordsAnswersAnEarlierRunKept", testRecordKept},
		{"RefusesADifferentInput", testDifferentInput},
		{"CountsWithoutPrepare", testCountsWithoutPrepare},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, fresh(t)) })
	}
}

// input returns a batch of n items, "id-000", "id-001", ..., under digest.
func input(n int, digest string) batch.Input {
	in := batch.Input{Digest: digest}
	for i := range n {
		in.IDs = append(in.IDs, fmt.Sprintf("id-%03d", i))
	}
	return in
}

// open opens a journal and prepares it for in, failing the test on error;
// the journal is closed when the test ends, if the test has not closed it.
func open(t *testing.T, o Opener, in batch.Input, opt batch.Options) batch.Journal {
	t.Helper()
	j, err := o()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			j.Close()
		}
	})
	if err := j.Prepare(context.Background(), in, opt); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return closer{j, &closed}
}

// closer is a Journal that notes it was closed, so that cleanup does not
// close it twice.
type closer struct {
	batch.Journal
	closed *bool
}

func (c closer) Close() error {
	*c.closed = true
	return c.Journal.Close()
}

func claim(t *testing.T, j batch.Journal, n int) []batch.Claim {
	t.Helper()
	c, err := j.Claim(context.Background(), n)
	if err != nil {
		t.Fatalf("Claim(%d): %v", n, err)
	}
	return c
}

func record(t *testing.T, j batch.Journal, outcomes ...batch.Outcome) {
	t.Helper()
	if err := j.Record(context.Background(), outcomes); err != nil {
		t.Fatalf("Record: %v", err)
	}
}

func counts(t *testing.T, j batch.Journal) batch.Counts {
	t.Helper()
	c, err := j.Counts(context.Background())
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return c
}

func outcomes(t *testing.T, j batch.Journal) []batch.Outcome {
	t.Helper()
	var all []batch.Outcome
	err := j.Outcomes(context.Background(), func(o batch.Outcome) error {
		all = append(all, o)
		return nil
	})
	if err != nil {
		t.Fatalf("Outcomes: %v", err)
	}
	return all
}

func ids(claims []batch.Claim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.ID)
	}
	return out
}

// claimAll claims until nothing is claimable.
func claimAll(t *testing.T, j batch.Journal) []batch.Claim {
	t.Helper()
	var all []batch.Claim
	for {
		c := claim(t, j, 4)
		if len(c) == 0 {
			return all
		}
		all = append(all, c...)
	}
}

func ok(id string) batch.Outcome {
	return batch.Outcome{ID: id, State: batch.Succeeded, StatusCode: 200, Body: []byte(`{"ok":true}`), Attempts: 1}
}

func failed(id string, s batch.State) batch.Outcome {
	return batch.Outcome{ID: id, State: s, StatusCode: 503, ErrorCode: "transient", ErrorMessage: "down", Attempts: 3}
}

// testRecordKept records answers that an earlier run received and could
// not record, as the next run does before it claims anything: items it
// never claimed, one of them claimed by a run that stopped. They stand,
// and are not handed out again.
func testRecordKept(t *testing.T, o Opener) {
	in := input(4, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 2) // the run that received the answers, stopped without recording them
	j.Close()
	j = open(t, o, in, batch.Options{})
	record(t, j, ok("id-001"), failed("id-002", batch.FailedPermanent))
	if got, want := counts(t, j), (batch.Counts{Total: 4, Pending: 2, Succeeded: 1, FailedPermanent: 1}); got != want {
		t.Errorf("counts: %+v, want %+v", got, want)
	}
	if got := ids(claimAll(t, j)); !slices.Equal(got, []string{"id-000", "id-003"}) {
		t.Errorf("claimed %v, want the two items without an answer", got)
	}
	if got := outcomes(t, j); len(got) != 2 || !bytes.Equal(got[0].Body, ok("id-001").Body) || got[1].State != batch.FailedPermanent {
		t.Errorf("outcomes %+v", got)
	}
}

func testPrepare(t *testing.T, o Opener) {
	j := open(t, o, input(5, "d1"), batch.Options{})
	if got, want := counts(t, j), (batch.Counts{Total: 5, Pending: 5}); got != want {
		t.Errorf("counts after Prepare: %+v, want %+v", got, want)
	}
	if got := outcomes(t, j); len(got) != 0 {
		t.Errorf("outcomes of a new journal: %v", got)
	}
}

func testClaimOrder(t *testing.T, o Opener) {
	in := input(7, "d1")
	j := open(t, o, in, batch.Options{})
	first, second := claim(t, j, 3), claim(t, j, 3)
	if got := append(ids(first), ids(second)...); !slices.Equal(got, in.IDs[:6]) {
		t.Errorf("claimed %v, want %v", got, in.IDs[:6])
	}
	for _, c := range append(first, second...) {
		if c.Resent {
			t.Errorf("%s claimed for the first time is marked resent", c.ID)
		}
	}
	if got, want := counts(t, j), (batch.Counts{Total: 7, Pending: 1, InFlight: 6}); got != want {
		t.Errorf("counts: %+v, want %+v", got, want)
	}
}

func testClaimOnce(t *testing.T, o Opener) {
	in := input(200, "d1")
	j := open(t, o, in, batch.Options{})
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				c, err := j.Claim(context.Background(), 3)
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if len(c) == 0 {
					return
				}
				mu.Lock()
				got = append(got, ids(c)...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, in.IDs) {
		t.Errorf("8 claimers got %d items (%d distinct), want each of %d once", len(got), len(slices.Compact(slices.Clone(got))), len(in.IDs))
	}
}

func testRecord(t *testing.T, o Opener) {
	in := input(4, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 4)
	big := bytes.Repeat([]byte("x"), 1<<20)
	want := []batch.Outcome{
		{ID: "id-000", State: batch.Succeeded, StatusCode: 200, RequestID: "req_1", Body: []byte(`{"choices":[{"text":"é ✓"}]}`), Attempts: 2},
		{ID: "id-001", State: batch.FailedPermanent, StatusCode: 400, RequestID: "req_2", Body: []byte(`{"error":{"message":"bad"}}`), ErrorCode: "permanent", ErrorMessage: "400 Bad Request", Attempts: 1},
		{ID: "id-003", State: batch.Succeeded, StatusCode: 200, Body: big, Attempts: 1},
	}
	// Recorded out of order, in two calls: Outcomes gives input order.
	record(t, j, want[2])
	record(t, j, want[1], want[0])
	got := outcomes(t, j)
	if len(got) != len(want) {
		t.Fatalf("got %d outcomes, want %d", len(got), len(want))
	}
	for i := range want {
		if !equal(got[i], want[i]) {
			t.Errorf("outcome %d: got %s, want %s", i, show(got[i]), show(want[i]))
		}
	}
	if c, w := counts(t, j), (batch.Counts{Total: 4, InFlight: 1, Succeeded: 2, FailedPermanent: 1}); c != w {
		t.Errorf("counts: %+v, want %+v", c, w)
	}
	// The outcomes survive the journal being closed and opened again.
	j.Close()
	again := open(t, o, in, batch.Options{})
	got = outcomes(t, again)
	if len(got) != len(want) || !equal(got[2], want[2]) || !equal(got[0], want[0]) {
		t.Errorf("after reopening: %d outcomes, first %s", len(got), show(got[0]))
	}
}

func equal(a, b batch.Outcome) bool {
	return a.ID == b.ID && a.State == b.State && a.StatusCode == b.StatusCode && a.RequestID == b.RequestID &&
		bytes.Equal(a.Body, b.Body) && a.ErrorCode == b.ErrorCode && a.ErrorMessage == b.ErrorMessage && a.Attempts == b.Attempts
}

func show(o batch.Outcome) string {
	body := string(o.Body)
	if len(body) > 40 {
		body = fmt.Sprintf("%s… (%d bytes)", body[:40], len(o.Body))
	}
	return fmt.Sprintf("{%s %v %d %q %q %q %q %d}", o.ID, o.State, o.StatusCode, o.RequestID, body, o.ErrorCode, o.ErrorMessage, o.Attempts)
}

func testRunEnds(t *testing.T, o Opener) {
	in := input(3, "d1")
	j := open(t, o, in, batch.Options{})
	claimAll(t, j)
	record(t, j, ok("id-000"), failed("id-001", batch.Failed), failed("id-002", batch.FailedPermanent))
	if c := claim(t, j, 10); len(c) != 0 {
		t.Errorf("a run claimed %v again after recording them", ids(c))
	}
}

// stoppedRun leaves the journal as a run that claimed every item, recorded
// id-000 Succeeded, id-001 Failed, id-002 FailedPermanent, gave id-003 back
// and stopped before recording id-004 and id-005. The caller closes the
// journal: how a run that dies without Close is taken over is each
// journal's own test (a lease, a lock that a dead process lets go).
func stoppedRun(t *testing.T, j batch.Journal) {
	t.Helper()
	if got := claimAll(t, j); len(got) != 6 {
		t.Fatalf("claimed %d items, want 6", len(got))
	}
	record(t, j, ok("id-000"), failed("id-001", batch.Failed), failed("id-002", batch.FailedPermanent), batch.Outcome{ID: "id-003", State: batch.Pending})
}

func testResume(t *testing.T, o Opener) {
	in := input(6, "d1")
	j := open(t, o, in, batch.Options{})
	stoppedRun(t, j)
	j.Close()

	next := open(t, o, in, batch.Options{})
	got := claimAll(t, next)
	want := []batch.Claim{{ID: "id-001"}, {ID: "id-003"}, {ID: "id-004", Resent: true}, {ID: "id-005", Resent: true}}
	if !slices.Equal(got, want) {
		t.Errorf("the next run claimed %+v, want %+v", got, want)
	}
	// id-001 is in flight again, and keeps its failure until a new
	// outcome comes.
	last := []batch.Outcome{ok("id-000"), failed("id-001", batch.Failed), failed("id-002", batch.FailedPermanent)}
	if got := outcomes(t, next); !slices.EqualFunc(got, last, equal) {
		t.Errorf("the next run sees %d outcomes, want id-000 succeeded, id-001 failed and id-002 failed permanently", len(got))
	}
}

// testLastOutcome checks that an item claimed again keeps its last
// outcome, through a give-back and a Close, until a new one is recorded.
func testLastOutcome(t *testing.T, o Opener) {
	in := input(2, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 2)
	record(t, j, failed("id-000", batch.Failed), failed("id-001", batch.Failed))
	j.Close()

	next := open(t, o, in, batch.Options{})
	claimAll(t, next)
	if got, want := counts(t, next), (batch.Counts{Total: 2, InFlight: 2}); got != want {
		t.Errorf("counts with both claimed again: %+v, want %+v", got, want)
	}
	record(t, next, batch.Outcome{ID: "id-000", State: batch.Pending})
	want := []batch.Outcome{failed("id-000", batch.Failed), failed("id-001", batch.Failed)}
	if got := outcomes(t, next); !slices.EqualFunc(got, want, equal) {
		t.Errorf("claimed again, one given back: %d outcomes, want both failures", len(got))
	}
	claim(t, next, 1)
	record(t, next, ok("id-000"))
	want[0] = ok("id-000")
	if got := outcomes(t, next); !slices.EqualFunc(got, want, equal) {
		t.Errorf("after a success: %d outcomes, want id-000's success and id-001's failure", len(got))
	}
	// id-001 is still unrecorded when the run ends.
	next.Close()
	if got := outcomes(t, open(t, o, in, batch.Options{})); !slices.EqualFunc(got, want, equal) {
		t.Errorf("after reopening: %d outcomes, want id-000's success and id-001's failure", len(got))
	}
}

func testRetryFailed(t *testing.T, o Opener) {
	in := input(6, "d1")
	j := open(t, o, in, batch.Options{})
	stoppedRun(t, j)
	j.Close()

	next := open(t, o, in, batch.Options{RetryFailed: true})
	got := ids(claimAll(t, next))
	if want := []string{"id-001", "id-002", "id-003", "id-004", "id-005"}; !slices.Equal(got, want) {
		t.Errorf("a run with RetryFailed claimed %v, want %v", got, want)
	}
	// What fails permanently in this run stays failed until the next.
	record(t, next, failed("id-002", batch.FailedPermanent), failed("id-001", batch.FailedPermanent))
	if c := claim(t, next, 10); len(c) != 0 {
		t.Errorf("the run claimed %v again after they failed in it", ids(c))
	}
}

func testCloseGivesBack(t *testing.T, o Opener) {
	in := input(3, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 2)
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	next := open(t, o, in, batch.Options{})
	want := []batch.Claim{{ID: "id-000", Resent: true}, {ID: "id-001", Resent: true}, {ID: "id-002"}}
	if got := claimAll(t, next); !slices.Equal(got, want) {
		t.Errorf("after Close, the next run claimed %+v, want %+v", got, want)
	}
}

func testFirstSuccess(t *testing.T, o Opener) {
	in := input(1, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 1)
	first := ok("id-000")
	first.RequestID = "first"
	record(t, j, first)
	late := ok("id-000")
	late.RequestID = "late"
	record(t, j, late, failed("id-000", batch.Failed))
	got := outcomes(t, j)
	if len(got) != 1 || got[0].RequestID != "first" || got[0].State != batch.Succeeded {
		t.Errorf("after later outcomes, got %+v, want the first success", got)
	}
}

func testDifferentInput(t *testing.T, o Opener) {
	in := input(2, "d1")
	j := open(t, o, in, batch.Options{})
	claim(t, j, 1)
	record(t, j, ok("id-000"))
	j.Close()

	other, err := o()
	if err != nil {
		t.Fatal(err)
	}
	err = other.Prepare(context.Background(), input(2, "d2"), batch.Options{})
	other.Close()
	if !errors.Is(err, batch.ErrDifferentInput) {
		t.Fatalf("Prepare with another input: %v, want ErrDifferentInput", err)
	}
	again := open(t, o, in, batch.Options{})
	if got := outcomes(t, again); len(got) != 1 || got[0].ID != "id-000" {
		t.Errorf("after refusing another input, the journal holds %+v", got)
	}
}

func testCountsWithoutPrepare(t *testing.T, o Opener) {
	in := input(6, "d1")
	j := open(t, o, in, batch.Options{})
	stoppedRun(t, j)
	j.Close()

	status, err := o()
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	got, err := status.Counts(context.Background())
	if err != nil {
		t.Fatalf("Counts without Prepare: %v", err)
	}
	// id-004 and id-005 were given back by Close.
	if want := (batch.Counts{Total: 6, Pending: 3, Succeeded: 1, Failed: 1, FailedPermanent: 1}); got != want {
		t.Errorf("counts: %+v, want %+v", got, want)
	}
}
