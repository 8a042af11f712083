package reboundpg

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// TestWorkersShareABatch runs three workers on one batch at once, each a
// dispatcher claiming and eight recorders recording, as rebound batch
// does: no item goes to two of them, and together they finish it.
func TestWorkersShareABatch(t *testing.T) {
	schema := freshSchema(t)
	ids := items(3000)
	var (
		mu      sync.Mutex
		claimed = map[string]int{} // guarded by mu: which worker claimed each item
		wg      sync.WaitGroup
	)
	for w := range 3 {
		j := openJournal(t, Config{Batch: "shared", Schema: schema, Worker: fmt.Sprintf("worker-%d", w)})
		wg.Go(func() {
			prepare(t, j, ids)
			work := make(chan string)
			var recorders sync.WaitGroup
			for range 8 {
				recorders.Go(func() {
					for id := range work {
						if err := j.Record(context.Background(), []batch.Outcome{succeeded(id)}); err != nil {
							t.Errorf("worker %d: Record: %v", w, err)
						}
					}
				})
			}
			defer recorders.Wait()
			defer close(work)
			for {
				c, err := j.Claim(context.Background(), 16)
				if err != nil {
					t.Errorf("worker %d: Claim: %v", w, err)
					return
				}
				if len(c) == 0 {
					return
				}
				for _, c := range c {
					mu.Lock()
					if prev, ok := claimed[c.ID]; ok {
						t.Errorf("%s claimed by worker %d and worker %d", c.ID, prev, w)
					}
					claimed[c.ID] = w
					mu.Unlock()
					if c.Resent {
						t.Errorf("worker %d: %s claimed as resent", w, c.ID)
					}
					work <- c.ID
				}
			}
		})
	}
	wg.Wait()
	per := make([]int, 3)
	for _, w := range claimed {
		per[w]++
	}
	t.Logf("items per worker: %v", per)
	if len(claimed) != len(ids) {
		t.Errorf("%d items claimed, want %d", len(claimed), len(ids))
	}
	j := openJournal(t, Config{Batch: "shared", Schema: schema})
	if c, err := j.Counts(context.Background()); err != nil || c != (batch.Counts{Total: len(ids), Succeeded: len(ids)}) {
		t.Errorf("counts: %+v, %v", c, err)
	}
}

// testLease is the lease of the lease tests: short, so that they are,
// and long enough for a renewal every third of it under the race
// detector.
const testLease = time.Second

// TestRenewalHoldsClaims checks that a worker that lives keeps its items
// past the lease's length: another worker claiming all the while gets
// none of them.
func TestRenewalHoldsClaims(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	a := openJournal(t, Config{Batch: "b", Schema: schema, Worker: "a", Lease: testLease})
	b := openJournal(t, Config{Batch: "b", Schema: schema, Worker: "b", Lease: testLease})
	prepare(t, a, items(5))
	prepare(t, b, items(5))
	held, err := a.Claim(context.Background(), 5)
	if err != nil || len(held) != 5 {
		t.Fatalf("a claimed %v, %v", held, err)
	}
	until := dbNow(t, a).Add(3 * testLease)
	polls := holdsWhileAlive(t, b, until)
	if c, _ := b.Counts(context.Background()); c.InFlight != 5 {
		t.Errorf("counts after three leases: %+v, want 5 in flight", c)
	}
	t.Logf("%d claims by another worker in three leases got none of the items", polls)
}

// holdsWhileAlive claims with j until the server's clock passes until,
// failing the test if a claim returns anything, and returns how many
// claims it made.
func holdsWhileAlive(t *testing.T, j *Journal, until time.Time) int {
	t.Helper()
	tick := time.NewTicker(testLease / 10)
	defer tick.Stop()
	polls := 0
	for ; dbNow(t, j).Before(until); polls++ {
		c, err := j.Claim(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) > 0 {
			t.Fatalf("claimed %+v while the worker holding them lives", c)
		}
		<-tick.C
	}
	return polls
}

func init() { children["hold"] = holdChild }

// holdChild is a worker that claims five items, says which on its
// standard output, and holds them (renewing their lease) until it is
// killed.
func holdChild() error {
	j, err := Open(context.Background(), postgresURL(), Config{Batch: "b", Schema: os.Getenv("REBOUND_SCHEMA"), Worker: "child", Lease: testLease})
	if err != nil {
		return err
	}
	if err := j.Prepare(context.Background(), batch.Input{Digest: "digest-1", IDs: items(20)}, batch.Options{}); err != nil {
		return err
	}
	c, err := j.Claim(context.Background(), 5)
	if err != nil {
		return err
	}
	var ids []string
	for _, c := range c {
		ids = append(ids, c.ID)
	}
	fmt.Println(strings.Join(ids, " "))
	select {} // until SIGKILL
}

// TestDeadWorkerIsTakenOver runs a worker in a child process that claims
// five items and is killed with SIGKILL: no Close, no more renewals.
// While it lives, its items are held past their lease; once it is dead,
// they are claimed again when the lease it last renewed runs out (by the
// server's clock), as Resent.
func TestDeadWorkerIsTakenOver(t *testing.T) {
	t.Parallel()
	schema := freshSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "REBOUND_CHILD=hold", "REBOUND_SCHEMA="+schema)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			child.Process.Signal(syscall.SIGKILL)
			child.Wait()
		}
	}
	defer kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's claims: %v", err)
	}
	held := strings.Fields(line)
	if len(held) != 5 {
		t.Fatalf("the child claimed %q, want 5 items", line)
	}

	j := openJournal(t, Config{Batch: "b", Schema: schema, Worker: "parent", Lease: testLease})
	if err := j.Prepare(context.Background(), batch.Input{Digest: "digest-1", IDs: items(20)}, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	rest, err := j.Claim(context.Background(), 100)
	if err != nil || len(rest) != 15 {
		t.Fatalf("the parent claimed %d items, %v; want the 15 the child does not hold", len(rest), err)
	}
	for _, c := range rest {
		if slices.Contains(held, c.ID) {
			t.Errorf("the parent claimed %s, which the child holds", c.ID)
		}
	}
	holdsWhileAlive(t, j, dbNow(t, j).Add(2*testLease))

	kill()
	var lastLease time.Time
	if err := j.pool.QueryRow(context.Background(), `SELECT max(lease_until) FROM `+j.sql.items.Sanitize()+` WHERE batch = 'b' AND id = ANY($1)`, held).Scan(&lastLease); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * testLease)
	tick := time.NewTicker(testLease / 20)
	defer tick.Stop()
	var taken []batch.Claim
	for len(taken) < len(held) {
		if time.Now().After(deadline) {
			t.Fatalf("after ten leases, the dead child's items taken over: %+v", taken)
		}
		c, err := j.Claim(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if after := dbNow(t, j); len(c) > 0 && after.Before(lastLease) {
			t.Errorf("claimed %+v by %v, before the child's lease ran out at %v", c, after, lastLease)
		}
		taken = append(taken, c...)
		<-tick.C
	}
	slices.SortFunc(taken, func(a, b batch.Claim) int { return strings.Compare(a.ID, b.ID) })
	for i, c := range taken {
		if c.ID != held[i] || !c.Resent {
			t.Errorf("took over %+v, want %s resent", c, held[i])
		}
	}
	t.Logf("the dead child's lease ran out at %v; taken over by %v", lastLease.Format(time.StampMilli), dbNow(t, j).Format(time.StampMilli))
}
