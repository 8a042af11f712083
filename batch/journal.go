package batch

import (
	"context"
	"errors"
	"strconv"
)

// ErrDifferentInput is the error of Journal.Prepare when the journal was
// made from another input: resuming it would answer one request with
// another's response.
var ErrDifferentInput = errors.New("batch: the journal was made from a different input")

// State is where an item of a batch stands in its journal.
type State uint8

// States of an item.
const (
	// Pending: never sent, or given back unanswered (Record with State
	// Pending), or claimed by a run that stopped before its outcome was
	// recorded.
	Pending State = iota
	// InFlight: claimed and not yet recorded.
	InFlight
	// Succeeded: answered with a 2xx; never sent again.
	Succeeded
	// Failed: failed in a way a later run may cure (a transient error, a
	// rate limit, an overload, an exhausted quota); the next run sends it
	// again.
	Failed
	// FailedPermanent: failed in a way no retry cures (a 400, a prompt
	// too long); sent again only when asked (Options.RetryFailed).
	FailedPermanent
)

var stateNames = [...]string{"pending", "in_flight", "succeeded", "failed", "failed_permanent"}

// String returns the state's name as JSON reports use it: "pending",
// "in_flight", "succeeded", "failed" or "failed_permanent".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Input identifies a batch to its journal: its requests' custom_ids in
// input order, each once (a journal refuses an input whose custom_ids
// repeat), and a digest of everything that was asked (File.Input).
type Input struct {
	Digest string
	IDs    []string
}

// Options are a run's choices that a journal applies when it hands out
// work.
type Options struct {
	// RetryFailed makes the items that failed permanently before this run
	// began claimable again. The default (false) leaves them failed.
	RetryFailed bool
}

// Claim is an item a journal handed to a run to send.
type Claim struct {
	// ID is the item's custom_id.
	ID string
	// Resent reports that an earlier claim of the item, by a run that
	// stopped or lost its lease, was never recorded: the request may have
	// reached the server, and this send may repeat it.
	Resent bool
}

// Outcome is what became of one item.
type Outcome struct {
	// ID is the item's custom_id.
	ID string
	// State is Succeeded, Failed or FailedPermanent; Pending gives the
	// claim back unsent (the run was stopped before it sent it), and
	// leaves the item's last outcome, if it has one, as it was. A claim
	// that was sent and got no answer is left unrecorded instead: Close,
	// or the next run's Prepare, hands it out again with Resent set. An
	// item given back keeps the Resent it had.
	State State
	// StatusCode is the final response's status; 0 when none came.
	StatusCode int
	// RequestID is the provider's id of the final request, when it sent
	// one.
	RequestID string
	// Body is the final response's body (for a failure, the error body),
	// as received.
	Body []byte
	// ErrorCode and ErrorMessage say why a failed item failed: the kind of
	// failure ("rate_limited", "permanent", ...) and a line about it.
	ErrorCode, ErrorMessage string
	// Attempts is how many attempts the final send made.
	Attempts int
}

// Counts is how many items of a batch stand in each state.
type Counts struct {
	Total           int `json:"total"`
	Pending         int `json:"pending"`
	InFlight        int `json:"in_flight"`
	Succeeded       int `json:"succeeded"`
	Failed          int `json:"failed"`
	FailedPermanent int `json:"failed_permanent"`
}

// A Journal records a batch's outcomes as they happen, so that a run that
// stops, whatever stops it, resumes where it was without sending again what
// has succeeded. One Journal value serves one run: Prepare, then Claim and
// Record until Claim has nothing more, then Outcomes to write the output.
// Its methods are safe for concurrent use.
//
// A journal that several runs share at once (on several machines) hands an
// item to one of them at a time, under a lease that the run holding it
// keeps alive; an item whose lease ran out is claimable again, with Resent
// set.
type Journal interface {
	// Prepare ties the journal to in, before Claim and Record. An empty
	// journal takes in's items, all Pending. One made from the same input
	// (the same Digest) is resumed: the items that an earlier run claimed
	// and never recorded become claimable again. One made from another
	// input is left alone, and the error wraps ErrDifferentInput.
	Prepare(ctx context.Context, in Input, opt Options) error

	// Claim hands out up to n items to send, in input order where it can,
	// and marks them InFlight before it returns. It hands out the Pending
	// items, those that an earlier run (or a run that lost its lease)
	// claimed and never recorded, those recorded Failed before this run's
	// Prepare and, with Options.RetryFailed, those recorded
	// FailedPermanent before it. It never hands out an item that is
	// InFlight under a live claim, or one this run has recorded, except
	// one given back as Pending. With runs that share a journal, "this
	// run's Prepare" is each run's own: a run that starts later retries
	// the failures recorded before it started.
	//
	// An empty result means nothing is claimable now. A journal that runs
	// share may still have items InFlight under other runs' leases
	// (Counts.InFlight), or Pending ones that another run is claiming at
	// that moment: they come back if that run stops, so a run that wants
	// the batch finished claims again, every so often, until Counts
	// reports nothing InFlight or Pending (Runner.Poll).
	Claim(ctx context.Context, n int) ([]Claim, error)

	// Record writes outcomes of claimed items, all of them or, on error,
	// none. An outcome for an item that has Succeeded is ignored: the
	// first success stands. It also takes the outcome of an item this run
	// has not claimed: an answer an earlier run received and could not
	// record (Runner.Unrecorded), which then stands as if recorded then.
	Record(ctx context.Context, outcomes []Outcome) error

	// Outcomes calls fn with the last outcome recorded for every item
	// that has one (Succeeded, Failed or FailedPermanent), in input
	// order, and stops at the first error fn returns, returning it. An
	// item claimed again keeps its last outcome until a new one is
	// recorded, so that output written while a run resends it (or after
	// that run stopped) still answers it; a Pending give-back records no
	// outcome. (Counts goes by current state: such an item counts
	// InFlight, or Pending.) fn must not call the journal: it may be
	// called inside a read that a write would wait for.
	Outcomes(ctx context.Context, fn func(Outcome) error) error

	// Counts returns how many items stand in each state.
	Counts(ctx context.Context) (Counts, error)

	// Close gives back what the journal holds (files, connections,
	// leases). Its claims never recorded become claimable by other runs at
	// once, as Resent: the run has stopped. (A run that dies without
	// Close leaves them to its lease's end, or to the next Prepare of a
	// journal that one run uses at a time.)
	Close() error
}
