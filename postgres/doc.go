// Package reboundpg keeps the journal of rebound batch in PostgreSQL, so
// that several workers, on several machines, run one batch together: each
// item goes to one of them at a time, what one of them recorded none sends
// again, and the items of a worker that dies go to the others.
//
// A Journal is a batch.Journal. Open it with the batch's name (which the
// workers share) and a schema, then use it as any journal: Prepare, Claim
// and Record until Claim has nothing more, Outcomes to write the output.
//
// # Tables
//
// Open creates the schema (Config.Schema, "rebound" by default) and two
// tables in it if they are missing; the rows of many batches share them.
// batches has a row per batch: its name, the digest of its input, its
// number of items. items has a row per item, keyed by (batch, seq), where
// seq is the item's place in the input, and unique on (batch, id): its
// state (the number of its batch.State), the lease that holds it (worker,
// a mark of the Journal value, lease_until), and its last outcome
// (outcome, that outcome's state, null until one is recorded; recorded_at,
// status_code, request_id, body as bytea, error_code, error_message,
// attempts), which a claim leaves in place until the next outcome. Two partial indexes on (batch, seq) hold only
// the rows a claim may take, the Pending and InFlight ones and the failed
// ones, so that a claim reads a few index entries however much of the
// batch is done. To remove a batch, delete its rows from both tables.
//
// The first worker to Prepare a batch inserts its row and copies its items
// in (COPY: 100 000 items take well under a second); a worker preparing at
// the same moment waits for that transaction on the batch's row, then
// finds the batch and compares digests. A batch made from another input is
// refused with an error that wraps batch.ErrDifferentInput and names it.
// The tables' creation runs under an advisory lock, since CREATE ... IF
// NOT EXISTS races with itself.
//
// # Leases
//
// Claim takes the first claimable rows in input order with FOR UPDATE SKIP
// LOCKED, so that workers claiming at once take different rows without
// waiting on each other, and marks them InFlight under a lease of
// Config.Lease (30 seconds by default). While a Journal holds claims, it
// renews their lease every third of a lease. A worker that dies renews
// nothing: when its leases run out, its items are claimable again, and
// Claim returns them with Resent set, since their request may have reached
// the provider. Close gives the items its journal holds back at once (they
// too come back Resent). A Record that comes after its lease ran out still
// counts: if another worker has taken the item over meanwhile, the first
// success stands, whichever worker it came from.
//
// # Clocks
//
// Every time is the database's: a lease runs until the server's now() plus
// its length, a claim compares leases with the server's now(), and "the
// failures recorded before this run's Prepare" are those recorded before
// the server's time at Prepare. Workers whose clocks disagree still agree
// on the leases.
//
// # Group commit
//
// rebound batch records each item's outcome as it comes, from up to 64
// goroutines at once. Each Record joins a queue; one writer goroutine takes
// everything waiting (up to 256 outcomes or 8 MiB of bodies) and writes it
// in one UPDATE from arrays, in one transaction, so that 64 Records cost
// one round trip and one commit. Record returns when its transaction has
// committed or failed: its outcomes are written all or none. If the server
// refuses a group (an outcome it cannot store), each Record in it is
// written alone, so that only its own fails.
//
// # When PostgreSQL goes away
//
// A failover, a restarted server, a killed backend or a dropped network
// breaks connections in the middle of a run. A statement that fails on its
// connection (a connection exception, a server shutting down or starting
// up, a reset or refused connection, no answer within 30 seconds) is tried
// again at once on a fresh connection, the pool's others being closed as
// they come back, then with backoff (50 ms doubling to 2 s, jittered):
// Claim, Record, the renewal of leases, Counts, Outcomes, Prepare and the
// give-back at Close alike. Each may run twice without harm: Record leaves
// a row as one run of it would (a success stands, a give-back applies only
// to a row still held); a claim runs in a transaction of its own, so that
// a connection lost before its commit leaves nothing claimed, and the rows
// of one whose commit went unanswered are looked for before claiming
// again.
//
// A retry waits at most a third of the lease for its answer (at least a
// second), so that a network that drops everything is tried a few times.
// The tries end when the first lease this worker holds runs out, a lease
// after its claim or last renewal (holding none, a lease after the first
// failure), and always after one retry: past that, its claims may be
// other workers', and the error wraps ErrUnreachable. Until a statement
// succeeds again, the next ones are tried once each, so that a run that
// stops does not wait a lease for each. rebound batch then
// stops: it claims nothing more, and an answer it could not record is
// kept (batch.Summary.Unrecorded) for the next run to record. What was
// recorded stays recorded; the claims of the stopped run come back when
// their lease runs out, and the next run, on any worker, resumes there.
// Another error of a statement (a constraint, a permission) is not tried
// again.
package reboundpg
