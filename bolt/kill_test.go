package reboundbolt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rebound-go/rebound/batch"
)

// The kill test runs this test binary again as a child that records
// outcomes as fast as it can, and kills it (SIGKILL) at random moments.
const (
	killEnvPath  = "REBOUNDBOLT_KILL_JOURNAL"
	killEnvRound = "REBOUNDBOLT_KILL_ROUND"
	killEnvSeed  = "REBOUNDBOLT_KILL_SEED" // to replay a run of the test

	killItems   = 4000
	killRounds  = 10
	killWorkers = 16 // also the child's claim size
)

func killInput() batch.Input {
	in := batch.Input{Digest: "kill-test"}
	for i := range killItems {
		in.IDs = append(in.IDs, fmt.Sprintf("item-%05d", i))
	}
	return in
}

func hash(parts ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, parts...)
	return h.Sum64()
}

// killOutcome is the outcome that the child of round records for id: the
// parent knows it too, to check every byte of what it finds.
func killOutcome(id string, round int) batch.Outcome {
	h := hash(id, "/", round)
	o := batch.Outcome{ID: id, RequestID: fmt.Sprintf("req-%s-%d", id, round), Attempts: 1 + int(h%3)}
	switch p := h % 100; {
	case p < 65:
		o.State, o.StatusCode = batch.Succeeded, 200
	case p < 80:
		o.State, o.StatusCode, o.ErrorCode, o.ErrorMessage = batch.Failed, 503, "overloaded", "503 Service Unavailable"
	case p < 87:
		o.State, o.StatusCode, o.ErrorCode, o.ErrorMessage = batch.FailedPermanent, 400, "permanent", "400 Bad Request"
	default:
		return batch.Outcome{ID: id, State: batch.Pending}
	}
	size := 500 + int(h>>8%4500)
	if h>>20%40 == 0 {
		size = 128<<10 + int(h>>28%(1<<20)) // spans many pages
	}
	head := fmt.Sprintf("%s|%v|%d|", id, o.State, round)
	o.Body = bytes.Repeat([]byte(head), size/len(head)+1)[:size]
	return o
}

// TestSurvivesKill kills a process that records outcomes, at random
// moments, again and again over one journal: every outcome that Record
// acknowledged is there, byte for byte, every claim never recorded comes
// back Resent, and the file always opens.
func TestSurvivesKill(t *testing.T) {
	if path := os.Getenv(killEnvPath); path != "" {
		round, _ := strconv.Atoi(os.Getenv(killEnvRound))
		killChild(t, path, round)
		return
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(killEnvSeed); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (%s=%d to replay the kill points)", seed, killEnvSeed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	path := filepath.Join(t.TempDir(), "kill.journal")
	in := killInput()
	m := make([]item, killItems)
	for i := range m {
		m[i].id = in.IDs[i]
	}
	index := make(map[string]int)
	for i, id := range in.IDs {
		index[id] = i
	}
	kills, totalAcks, totalUnacked, totalUnseen := 0, 0, 0, 0
	for round := 1; round <= killRounds; round++ {
		target := 1 + rng.IntN(200)
		events, killed := runChild(t, path, round, target)
		if killed {
			kills++
		}
		for _, e := range events {
			it := &m[index[e.id]]
			if e.claim {
				if want := it.resent; e.resent != want {
					t.Fatalf("round %d: %s claimed with Resent=%v, want %v (it stood %v, resent %v)", round, e.id, e.resent, want, it.state, it.resent)
				}
				it.state, it.claimed = batch.InFlight, round // keeping its last outcome
				continue
			}
			if it.state == batch.Succeeded {
				continue
			}
			if e.state == batch.Pending {
				it.state = batch.Pending // keeping its Resent
				continue
			}
			it.state, it.resent, it.run = e.state, false, round
		}
		unacked, unseen := checkJournal(t, path, round, m)
		acks := 0
		for _, e := range events {
			if !e.claim {
				acks++
			}
		}
		totalAcks, totalUnacked, totalUnseen = totalAcks+acks, totalUnacked+unacked, totalUnseen+unseen
		// What the next Prepare does to the claims of a dead run.
		for i := range m {
			if m[i].state == batch.InFlight {
				m[i].state, m[i].resent = batch.Pending, true
			}
		}
	}
	t.Logf("%d kills; %d outcomes acknowledged, all found; %d recorded but killed before acknowledged; %d claims made but killed before printed", kills, totalAcks, totalUnacked, totalUnseen)
	if kills < killRounds*4/5 {
		t.Errorf("%d kills in %d rounds, want at least %d: the child ran out of work", kills, killRounds, killRounds*4/5)
	}

	// A run after the last kill: Prepare hands back, Resent, what the
	// dead run held.
	j, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, it := range m {
		if it.state == batch.Pending || it.state == batch.Failed {
			want[it.id] = it.resent
		}
	}
	got := map[string]bool{}
	for {
		c, err := j.Claim(ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) == 0 {
			break
		}
		for _, c := range c {
			got[c.ID] = c.Resent
		}
	}
	if len(got) != len(want) {
		t.Errorf("the last run claimed %d items, want %d", len(got), len(want))
	}
	for id, r := range want {
		if g, ok := got[id]; !ok || g != r {
			t.Errorf("the last run claimed %s: %v, Resent %v; want Resent %v", id, ok, g, r)
		}
	}
}

// item is what the parent knows of an item.
type item struct {
	id      string
	state   batch.State
	resent  bool
	run     int // the round whose outcome it holds; 0 before its first
	claimed int // the round that claimed it last
}

type event struct {
	id     string
	claim  bool
	resent bool
	state  batch.State
}

// runChild runs round's child, kills it after target acknowledgements and
// returns what it printed: claims and acknowledged outcomes, in order.
func runChild(t *testing.T, path string, round, target int) ([]event, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivesKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnvPath+"="+path, killEnvRound+"="+strconv.Itoa(round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		events []event
		acks   int
		done   bool
		killed bool
		other  []string
	)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "CLAIM":
			events = append(events, event{id: f[1], claim: true, resent: f[2] == "1"})
		case len(f) == 3 && f[0] == "ACK":
			s, _ := strconv.Atoi(f[2])
			events = append(events, event{id: f[1], state: batch.State(s)})
			if acks++; acks == target {
				cmd.Process.Kill()
				killed = true
			}
		case len(f) == 1 && f[0] == "DONE":
			done = true
		default:
			other = append(other, sc.Text())
		}
	}
	err = cmd.Wait()
	if killed {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: the child ended with %v before it was killed:\n%s%s", round, err, strings.Join(other, "\n"), stderr.String())
		}
	} else if err != nil || !done {
		t.Fatalf("round %d: the child ended with %v:\n%s%s", round, err, strings.Join(other, "\n"), stderr.String())
	}
	return events, killed
}

// killChild is the child: a run that claims and records until it is
// killed, printing each claim before it sends it and each outcome once
// Record has returned nil.
func killChild(t *testing.T, path string, round int) {
	j, err := Open(path, Config{LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	if err := j.Prepare(ctx, killInput(), batch.Options{}); err != nil {
		t.Fatal(err)
	}
	var (
		work    = make(chan string)
		workers sync.WaitGroup
		sent    sync.WaitGroup // the items handed to workers and not recorded yet
		// printed keeps a claim from coming between an outcome recorded
		// and its line: an item given back (Pending) and claimed again at
		// once would otherwise be printed claimed, then given back, and
		// the parent would take it for given back while it is in flight.
		printed sync.RWMutex
	)
	for range killWorkers {
		workers.Go(func() {
			for id := range work {
				o := killOutcome(id, round)
				printed.RLock()
				if err := j.Record(ctx, []batch.Outcome{o}); err != nil {
					t.Error(err)
				} else {
					// One write: lines of several workers do not mix.
					os.Stdout.WriteString(fmt.Sprintf("ACK %s %d\n", id, o.State))
				}
				printed.RUnlock()
				sent.Done()
			}
		})
	}
	defer workers.Wait()
	defer close(work)
	for idle := false; ; {
		printed.Lock()
		claims, err := j.Claim(ctx, killWorkers)
		if err != nil {
			printed.Unlock()
			t.Error(err)
			return
		}
		if len(claims) == 0 {
			printed.Unlock()
			if idle {
				os.Stdout.WriteString("DONE\n")
				return
			}
			// Items given back (Pending) are claimable again once
			// recorded: wait for them before deciding nothing is left.
			sent.Wait()
			idle = true
			continue
		}
		idle = false
		var b strings.Builder
		for _, c := range claims {
			r := 0
			if c.Resent {
				r = 1
			}
			fmt.Fprintf(&b, "CLAIM %s %d\n", c.ID, r)
		}
		os.Stdout.WriteString(b.String())
		printed.Unlock()
		for _, c := range claims {
			sent.Add(1)
			work <- c.ID
		}
	}
}

// checkJournal reads the journal as the child left it and compares it
// with what the child printed (m), adopting what the child did but could
// not print before it died: an outcome recorded but not acknowledged, and
// one claim whose items it had not printed.
func checkJournal(t *testing.T, path string, round int, m []item) (unacked, unseen int) {
	t.Helper()
	j, err := Open(path, Config{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("round %d: the journal does not open after the kill: %v", round, err)
	}
	defer j.Close()
	var (
		want     batch.Counts
		answered int // items with an outcome, whatever their state now
	)
	err = j.db.View(func(tx *bolt.Tx) error {
		items, outcomes := tx.Bucket(itemsBucket), tx.Bucket(outcomesBucket)
		for pos := range m {
			it := &m[pos]
			k := putKey(nil, uint32(pos))
			s, flags, id, err := decodeItem(items.Get(k))
			if err != nil || string(id) != it.id {
				return fmt.Errorf("item %d: %v, id %q", pos, err, id)
			}
			resent := flags&flagResent != 0
			var o *batch.Outcome
			if v := outcomes.Get(k); v != nil {
				o = &batch.Outcome{ID: it.id}
				if err := decodeOutcome(v, o); err != nil {
					return fmt.Errorf("%s: %v", it.id, err)
				}
			}
			switch {
			case s == it.state && resent == it.resent:
			case it.state == batch.InFlight && it.claimed == round && s != batch.InFlight:
				// Recorded, and killed before it said so.
				unacked++
				if want := killOutcome(it.id, round); s != want.State {
					return fmt.Errorf("%s, claimed in round %d, is %v; that round records %v", it.id, round, s, want.State)
				}
				if s == batch.Pending {
					it.state = s
				} else {
					it.state, it.resent, it.run = s, false, round
				}
			case s == batch.InFlight && (it.state == batch.Pending || it.state == batch.Failed) && resent == it.resent:
				// Claimed, and killed before it said so.
				if unseen++; unseen > killWorkers {
					return fmt.Errorf("%s is in flight, and more than one claim's items are", it.id)
				}
				it.state, it.claimed = batch.InFlight, round
			default:
				return fmt.Errorf("%s is %v (resent %v), want %v (resent %v)", it.id, s, resent, it.state, it.resent)
			}
			switch {
			case it.state >= batch.Succeeded && o == nil:
				return fmt.Errorf("%s is %v without an outcome", it.id, it.state)
			case it.run == 0 && o != nil:
				return fmt.Errorf("%s, never recorded, has an outcome", it.id)
			case it.run != 0 && o == nil:
				return fmt.Errorf("%s, recorded in round %d, is %v without an outcome", it.id, it.run, it.state)
			case o != nil && !equal(*o, killOutcome(it.id, it.run)):
				return fmt.Errorf("%s: the outcome of round %d is %.60q…, want %.60q…", it.id, it.run, o.Body, killOutcome(it.id, it.run).Body)
			}
			want.Total++
			*stateCount(&want, it.state)++
			if it.run != 0 {
				answered++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	got, err := j.Counts(context.Background())
	if err != nil || got != want {
		t.Fatalf("round %d: Counts %+v, %v; want %+v", round, got, err, want)
	}
	n := 0
	err = j.Outcomes(context.Background(), func(batch.Outcome) error { n++; return nil })
	if err != nil || n != answered {
		t.Fatalf("round %d: Outcomes gave %d, %v; want %d", round, n, err, answered)
	}
	return unacked, unseen
}

func equal(a, b batch.Outcome) bool {
	return a.ID == b.ID && a.State == b.State && a.StatusCode == b.StatusCode && a.RequestID == b.RequestID &&
		bytes.Equal(a.Body, b.Body) && a.ErrorCode == b.ErrorCode && a.ErrorMessage == b.ErrorMessage && a.Attempts == b.Attempts
}
