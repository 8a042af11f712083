package reboundpg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/batch"
)

// The outage tests run a batch over a journal whose connections are
// killed, or whose database goes away, while requests are in flight.

var appNames atomic.Int64

// appName returns an application_name unique to the run and the test, for
// the connections of the journal under test alone.
func appName() string {
	return fmt.Sprintf("rebound_test_%s_%d", runID, appNames.Add(1))
}

// withParam adds a parameter to a connection string, URL or key=value.
func withParam(conn, key, value string) string {
	if u, err := url.Parse(conn); err == nil && u.Scheme != "" {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return conn + " " + key + "=" + value
}

// killBackends ends the server side of every connection named app, as an
// administrator or a failover would, and returns how many it ended.
func killBackends(t testing.TB, app string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		t.Errorf("connecting to kill the journal's connections: %v", err)
		return 0
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Errorf("killing the journal's connections: %v", err)
	}
	return n
}

// batchInput returns a batch of n chat requests, "req-0", ..., each naming
// its custom_id in its metadata.
func batchInput(t testing.TB, n int) *batch.File {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","metadata":{"id":"req-%d"}}}`+"\n", i, i)
	}
	f, err := batch.Read(strings.NewReader(b.String()))
	if err != nil || len(f.Malformed) > 0 {
		t.Fatalf("input: %v %v", err, f.Malformed)
	}
	return f
}

// provider answers every request in memory with a body naming its
// custom_id, counts what it answers, and calls before, if set, before its
// nth answer.
type provider struct {
	before func(n int)

	mu   sync.Mutex // guards sent and n
	sent map[string]int
	n    int
}

func (p *provider) RoundTrip(req *http.Request) (*http.Response, error) {
	var b struct{ Metadata struct{ ID string } }
	json.NewDecoder(req.Body).Decode(&b)
	req.Body.Close()
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	if p.before != nil {
		p.before(n)
	}
	p.mu.Lock()
	if p.sent == nil {
		p.sent = map[string]int{}
	}
	p.sent[b.Metadata.ID]++
	p.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{"answer":"` + b.Metadata.ID + `"}`)),
		Request:    req,
	}, nil
}

// answered returns how many times each custom_id was answered.
func (p *provider) answered() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// quickPolicy sends each request once: a provider in memory never fails.
var quickPolicy = rebound.Policy{MaxAttempts: 1}

// TestRunSurvivesKilledConnections kills every connection of the journal,
// several times, while a batch runs: the writes that fail on them go
// through fresh connections, the batch completes, every answer is
// recorded, and no request is sent twice.
func TestRunSurvivesKilledConnections(t *testing.T) {
	const items = 200
	schema, app := freshSchema(t), appName()
	j, err := Open(context.Background(), withParam(postgresURL(), "application_name", app), Config{Batch: "b", Schema: schema, Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var killed atomic.Int64
	p := &provider{before: func(n int) {
		if n%25 == 0 { // mid-run, with claims and Records under way
			killed.Add(int64(killBackends(t, app)))
		}
	}}
	r := &batch.Runner{BaseURL: "http://provider", Base: p, Concurrency: 8, Policy: quickPolicy}
	s, err := r.Run(context.Background(), batchInput(t, items), j)
	if err != nil {
		t.Fatalf("Run: %v (%+v)", err, s.Progress)
	}
	t.Logf("%d connections killed during the run", killed.Load())
	if killed.Load() < 5 {
		t.Errorf("only %d connections were killed", killed.Load())
	}
	if s.Succeeded != items || s.Resent != 0 {
		t.Errorf("the run: %+v; want %d succeeded, none resent", s, items)
	}
	sent := p.answered()
	for id, n := range sent {
		if n != 1 {
			t.Errorf("%s sent %d times", id, n)
		}
	}
	c, err := j.Counts(context.Background())
	if err != nil || c != (batch.Counts{Total: items, Succeeded: items}) || len(sent) != items {
		t.Errorf("counts %+v, %v; %d ids sent; want all %d sent once and recorded", c, err, len(sent), items)
	}
}

// forwarder carries TCP connections from a loopback port to PostgreSQL,
// and can be cut: it then closes what it carries and every connection
// that comes, as a database that went away, until it is restored. It can
// also lose the answer to one message (dropReplyTo).
type forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex // guards down, conns, trap and sprung
	down   bool
	conns  map[net.Conn]bool
	trap   []byte
	sprung bool
}

// newForwarder starts a forwarder to the tests' PostgreSQL, closed when
// the test ends.
func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	cfg, err := pgx.ParseConfig(postgresURL())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), conns: map[net.Conn]bool{}}
	f.wg.Go(f.accept)
	t.Cleanup(func() {
		ln.Close()
		f.cut()
		f.wg.Wait()
	})
	return f
}

// url is the tests' connection string, to the forwarder.
func (f *forwarder) url(t *testing.T) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(f.ln.Addr().String())
	u, err := url.Parse(postgresURL())
	if err != nil || u.Scheme == "" {
		return postgresURL() + " host=" + host + " port=" + port
	}
	u.Host = f.ln.Addr().String()
	return u.String()
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.carry(c) })
	}
}

// track notes c, to close it at the cut, unless the forwarder is cut.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *forwarder) carry(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer s.Close()
	if !f.track(s) {
		return
	}
	var (
		both    sync.WaitGroup
		swallow atomic.Bool // the server's next answer is lost, and the client's connection with it
	)
	both.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if f.spring(buf[:n]) {
					swallow.Store(true) // before the server can answer
				}
				if _, err := s.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		s.Close()
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && swallow.Load() {
			break
		}
		if n > 0 {
			if _, err := c.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.Close()
	s.Close()
	both.Wait()
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, s)
	f.mu.Unlock()
}

// dropReplyTo arms the forwarder: the first message from a client that
// holds msg reaches the server, and the server's answer is lost, the
// client's connection closed before it: the client cannot tell whether it
// was done.
func (f *forwarder) dropReplyTo(msg []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trap = msg
}

// spring reports whether b holds the armed message, disarming it.
func (f *forwarder) spring(b []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trap == nil || !bytes.Contains(b, f.trap) {
		return false
	}
	f.trap, f.sprung = nil, true
	return true
}

func (f *forwarder) hasSprung() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sprung
}

// cut closes every connection and refuses new ones.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for c := range f.conns {
		c.Close()
	}
}

// restore lets connections through again.
func (f *forwarder) restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
}

// TestRunStopsWhenTheDatabaseStaysAway cuts the journal off its database
// mid-run for longer than the lease: the run stops with ErrUnreachable,
// and every answer it received is either recorded or returned to keep.
// The next run, once the database is back, records the kept answers and
// sends the rest: no request is sent twice.
func TestRunStopsWhenTheDatabaseStaysAway(t *testing.T) {
	const (
		items = 150
		lease = 2 * time.Second // the run stops about a lease after the cut
	)
	schema, fw := freshSchema(t), newForwarder(t)
	j, err := Open(context.Background(), fw.url(t), Config{Batch: "b", Schema: schema, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{before: func(n int) {
		if n == 60 { // with requests in flight
			fw.cut()
		}
	}}
	f := batchInput(t, items)
	r := &batch.Runner{BaseURL: "http://provider", Base: p, Concurrency: 8, Policy: quickPolicy}
	s, err := r.Run(context.Background(), f, j)
	closeErr := j.Close()
	t.Logf("the run: %v; %d answers unrecorded; Close: %v", err, len(s.Unrecorded), closeErr)
	if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Run: %v; want one line wrapping ErrUnreachable", err)
	}
	first := p.answered()
	p.mu.Lock()
	p.sent = nil
	p.mu.Unlock()

	fw.restore()
	recorded := map[string]bool{}
	check := openJournal(t, Config{Batch: "b", Schema: schema})
	check.Outcomes(context.Background(), func(o batch.Outcome) error {
		recorded[o.ID] = true
		return nil
	})
	kept := map[string]bool{}
	for _, o := range s.Unrecorded {
		kept[o.ID] = true
		if want := `{"answer":"` + o.ID + `"}`; o.State != batch.Succeeded || string(o.Body) != want {
			t.Errorf("kept %+v; want the answer, %s", o, want)
		}
	}
	for id := range first {
		if !recorded[id] && !kept[id] {
			t.Errorf("the answer to %s is neither recorded nor kept", id)
		}
	}
	if len(kept) == 0 || len(first) >= items {
		t.Errorf("%d answers kept, %d ids sent; want the run stopped with answers in flight", len(kept), len(first))
	}

	r = &batch.Runner{BaseURL: "http://provider", Base: p, Concurrency: 8, Policy: quickPolicy, Unrecorded: s.Unrecorded}
	next, err := r.Run(context.Background(), f, openJournal(t, Config{Batch: "b", Schema: schema, Lease: lease}))
	if err != nil {
		t.Fatalf("the next run: %v", err)
	}
	second := p.answered()
	for id, n := range second {
		if first[id] > 0 || n != 1 {
			t.Errorf("%s sent %d times by the first run and %d by the next; want once in all", id, first[id], n)
		}
	}
	if c, err := check.Counts(context.Background()); err != nil || c.Succeeded != items || len(first)+len(second) != items {
		t.Errorf("after the next run: %+v, %v; %d and %d ids sent; want all %d sent once and succeeded", c, err, len(first), len(second), items)
	}
	t.Logf("the next run: %d sent, %d of them resent", next.Sent, next.Resent)
}

// TestAClaimWhoseCommitGoesUnheardStands breaks the connection after the
// server has committed a claim and before its answer comes back: Claim
// finds the rows it claimed and hands them out, rather than claim others
// and leave these in flight, unsent, until their lease runs out.
func TestAClaimWhoseCommitGoesUnheardStands(t *testing.T) {
	schema, fw := freshSchema(t), newForwarder(t)
	j, err := Open(context.Background(), fw.url(t), Config{Batch: "b", Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ids := items(10)
	prepare(t, j, ids)
	fw.dropReplyTo([]byte("commit\x00")) // the claim's: a simple query, "commit"
	first, err := j.Claim(context.Background(), 4)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if !fw.hasSprung() {
		t.Fatal("the claim's commit never went through the forwarder")
	}
	if got := claimIDs(first); !slices.Equal(got, ids[:4]) {
		t.Errorf("claimed %v; want the rows the unheard commit claimed, %v", got, ids[:4])
	}
	rest, err := j.Claim(context.Background(), 10)
	if err != nil || !slices.Equal(claimIDs(rest), ids[4:]) {
		t.Errorf("the next claim: %v, %v; want %v", claimIDs(rest), err, ids[4:])
	}
	for _, c := range append(first, rest...) {
		if c.Resent {
			t.Errorf("%s claimed as resent", c.ID)
		}
	}
}

func claimIDs(claims []batch.Claim) []string {
	var ids []string
	for _, c := range claims {
		ids = append(ids, c.ID)
	}
	return ids
}
