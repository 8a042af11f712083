package reboundmcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scripted is an upstream whose every start is a pipe the test plays the
// server on, by hand, line by line.
type scripted struct {
	starts chan *script
}

type script struct {
	conn net.Conn
	in   *bufio.Scanner
}

func newScripted() *scripted { return &scripted{starts: make(chan *script, 16)} }

func (s *scripted) upstream() Upstream {
	return Upstream{name: "scripted", dial: func(ctx context.Context, _ *Options) (mcp.Connection, error) {
		server, client := net.Pipe()
		s.starts <- &script{conn: server, in: bufio.NewScanner(server)}
		return (&mcp.IOTransport{Reader: client, Writer: client}).Connect(ctx)
	}}
}

// next reads the next message rebound sent.
func (sc *script) next(t *testing.T) map[string]any {
	t.Helper()
	if !sc.in.Scan() {
		t.Fatalf("the server's input ended: %v", sc.in.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(sc.in.Bytes(), &m); err != nil {
		t.Fatalf("rebound sent %q: %v", sc.in.Bytes(), err)
	}
	return m
}

func (sc *script) send(line string) { sc.conn.Write([]byte(line + "\n")) }

// rawRequest writes a request with the given ID straight into rebound's
// connection, as a client would.
func rawRequest(t *testing.T, conn mcp.Connection, id float64, method, params string) {
	t.Helper()
	rid, _ := jsonrpc.MakeID(id)
	if err := conn.Write(t.Context(), &jsonrpc.Request{ID: rid, Method: method, Params: json.RawMessage(params)}); err != nil {
		t.Fatal(err)
	}
}

func readResponse(t *testing.T, conn mcp.Connection) *jsonrpc.Response {
	t.Helper()
	for {
		msg, err := conn.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := msg.(*jsonrpc.Response); ok {
			return r
		}
	}
}

func TestServerAnsweringGarbageIsRestartedAndAReadOnlyCallResent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		first := <-s.starts
		rawRequest(t, conn, 1, "ping", "{}")
		first.next(t)
		first.send("}}} not JSON at all {{{")
		second := <-s.starts
		ping := second.next(t)
		if ping["method"] != "ping" {
			t.Fatalf("the restarted server got %v, want the ping again", ping)
		}
		second.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, ping["id"]))
		if r := readResponse(t, conn); r.Error != nil || r.ID.Raw() != int64(1) {
			t.Fatalf("answer %+v", r)
		}
	})
}

func TestServerAnsweringTwiceGivesTheClientOneAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		sc := <-s.starts
		rawRequest(t, conn, 7, "ping", "{}")
		req := sc.next(t)
		for range 2 {
			sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, req["id"]))
		}
		sc.send(`{"jsonrpc":"2.0","id":999,"result":{}}`) // an answer to nothing
		rawRequest(t, conn, 8, "ping", "{}")
		req = sc.next(t)
		sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, req["id"]))
		var ids []any
		for range 2 {
			ids = append(ids, readResponse(t, conn).ID.Raw())
		}
		if fmt.Sprint(ids) != "[7 8]" {
			t.Fatalf("the client got answers %v, want [7 8]", ids)
		}
	})
}

func TestClientReusingAnIDInFlightIsRefusedAndTheFirstAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		sc := <-s.starts
		rawRequest(t, conn, 1, "ping", "{}")
		req := sc.next(t)
		rawRequest(t, conn, 1, "ping", "{}")
		r := readResponse(t, conn)
		if r.Error == nil || !strings.Contains(r.Error.Error(), "already in flight") {
			t.Fatalf("the reused ID got %+v, want a refusal", r)
		}
		sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, req["id"]))
		if r := readResponse(t, conn); r.Error != nil {
			t.Fatalf("the first: %+v", r)
		}
		// Once answered, the ID is free again.
		rawRequest(t, conn, 1, "ping", "{}")
		req = sc.next(t)
		sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, req["id"]))
		if r := readResponse(t, conn); r.Error != nil {
			t.Fatalf("the ID reused after its answer: %+v", r)
		}
	})
}

func TestNotificationFloodIsPassedOnAndListedOnceAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		sc := <-s.starts
		var mu sync.Mutex
		lists := 0
		var wg sync.WaitGroup
		wg.Go(func() { // the server: answers every list with nothing, counts them
			for sc.in.Scan() {
				var m map[string]any
				json.Unmarshal(sc.in.Bytes(), &m)
				if m["method"] == "tools/list" {
					mu.Lock()
					lists++
					mu.Unlock()
				}
				if m["id"] != nil {
					key := strings.TrimSuffix(strings.TrimPrefix(m["method"].(string), ""), "/list")
					sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{%q:[]}}`, m["id"], key))
				}
			}
		})
		const flood = 2000
		wg.Go(func() {
			for range flood {
				sc.send(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			}
		})
		for range flood {
			msg, err := conn.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := msg.(*jsonrpc.Request); !ok || r.Method != "notifications/tools/list_changed" {
				t.Fatalf("got %v", msg)
			}
		}
		synctest.Wait()
		conn.Close()
		sc.conn.Close()
		wg.Wait()
		t.Logf("%d list_changed notifications, %d tools/list requests", flood, lists)
		if lists == 0 || lists > flood/2 {
			t.Errorf("%d listings for %d notifications", lists, flood)
		}
	})
}

func TestCloseDuringARestartLeavesNothingRunning(t *testing.T) {
	for _, when := range []string{"in the backoff", "in the replay"} {
		t.Run(when, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScripted()
				conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
				sc := <-s.starts
				rawRequest(t, conn, 1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}`)
				req := sc.next(t)
				sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, req["id"]))
				readResponse(t, conn)
				sc.conn.Close()
				sc = <-s.starts // the first restart is at once
				if when == "in the backoff" {
					sc.conn.Close() // the second waits out the backoff
				} else {
					sc.next(t) // the replayed initialize, never answered
				}
				synctest.Wait()
				conn.Close() // returns once every goroutine of its own has; synctest fails on any left
			})
		})
	}
}

func TestOddOptionsStillWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			if tool == "slow" {
				time.Sleep(10 * time.Minute)
			}
			return "ok", nil
		}
		var logs logBuffer
		negative := time.Duration(-1)
		o := Options{DownWait: negative, IdleTimeout: negative, RestartMin: negative, RestartMax: negative,
			HealthyAfter: negative, CrashLimit: -1, CrashWindow: negative, CrashCooldown: negative, Logger: logs.logger()}
		cs := connect(t, f, o, true, nil)
		if _, err := callText(t, cs, "slow"); err != nil {
			t.Fatalf("a 10-minute call with no idle timeout: %v", err)
		}
		f.crash() // restarted at once
		synctest.Wait()
		f.crash() // down for a backoff of 50 ms to 100 ms
		synctest.Wait()
		start := time.Now()
		if _, err := callText(t, cs, "read"); err == nil || time.Since(start) != 0 {
			t.Fatalf("a call to a down server with a negative down-wait: %v after %v, want an error at once", err, time.Since(start))
		}
		var delays []string
		for _, l := range logs.lines(t, "mcp.restart") {
			delays = append(delays, fmt.Sprint(l["delay_ms"]))
		}
		if len(delays) != 2 || delays[0] != "0" || len(delays[1]) != 2 || delays[1] < "50" {
			t.Errorf("restart delays %v ms: want the defaults' at once, then from 50", delays)
		}
	})
}

// TestClientCancellingANumberedCallStopsIt: the client's
// notifications/cancelled, whose requestId is a JSON number as every SDK
// sends it, reaches the server under the ID rebound gave the request, and
// the cancelled call gets no answer.
func TestClientCancellingANumberedCallStopsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		sc := <-s.starts
		rawRequest(t, conn, 3, "ping", "{}")
		req := sc.next(t)
		cancel := &jsonrpc.Request{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":3,"reason":"the user pressed Esc"}`)}
		if err := conn.Write(t.Context(), cancel); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		rawRequest(t, conn, 4, "ping", "{}")
		got := sc.next(t)
		params, _ := got["params"].(map[string]any)
		if got["method"] != "notifications/cancelled" || params["requestId"] != req["id"] {
			t.Fatalf("after the client cancelled request 3, the server got %v; want notifications/cancelled of request %v", got, req["id"])
		}
		sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, req["id"])) // too late
		ping := sc.next(t)
		sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{}}`, ping["id"]))
		if r := readResponse(t, conn); r.ID.Raw() != int64(4) {
			t.Fatalf("the client got an answer to %v, want only the one to 4", r.ID.Raw())
		}
	})
}

// readFor returns the messages rebound has for the client, read until
// none comes for a virtual second.
func readFor(t *testing.T, conn mcp.Connection) []jsonrpc.Message {
	t.Helper()
	var msgs []jsonrpc.Message
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		msg, err := conn.Read(ctx)
		cancel()
		if err != nil {
			return msgs
		}
		msgs = append(msgs, msg)
	}
}

// onWire is msgs as they go on the wire, for failure messages.
func onWire(msgs ...jsonrpc.Message) string {
	var lines []string
	for _, m := range msgs {
		data, _ := jsonrpc.EncodeMessage(m)
		lines = append(lines, string(data))
	}
	return "[" + strings.Join(lines, " ") + "]"
}

// initializeScripted passes the client's initialize to sc and its answer
// back, so that a restart replays it.
func initializeScripted(t *testing.T, conn mcp.Connection, sc *script) {
	t.Helper()
	rawRequest(t, conn, 1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}`)
	answerInitialize(t, sc)
	readResponse(t, conn)
}

// answerInitialize answers the initialize sc is sent next.
func answerInitialize(t *testing.T, sc *script) {
	t.Helper()
	req := sc.next(t)
	if req["method"] != "initialize" {
		t.Fatalf("the server got %v, want initialize", req)
	}
	sc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, req["id"]))
}

func elicit(question string) string {
	return `{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"` + question + `","requestedSchema":{"type":"object","properties":{}}}}`
}

// TestAnswerToADeadServersRequestIsDropped: a server asks the client
// (elicitation, id 0) and dies; its restart asks its own question under
// the same id 0. The client is told the first question is void
// (notifications/cancelled, under the ID it was asked with), the two
// questions reach it under IDs of their own, and its answer to the
// first never reaches the new server, which gets only the answer to its
// own question.
func TestAnswerToADeadServersRequestIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		first := <-s.starts
		initializeScripted(t, conn, first)
		first.send(elicit("delete repo scratch?"))
		msgs := readFor(t, conn)
		scratch, ok := msgs[0].(*jsonrpc.Request)
		if len(msgs) != 1 || !ok || !strings.Contains(string(scratch.Params), "scratch") {
			t.Fatalf("the client got %s, want the first question", onWire(msgs...))
		}
		first.conn.Close() // the server dies with its question open
		second := <-s.starts
		answerInitialize(t, second)
		second.send(elicit("delete repo production?"))
		msgs = readFor(t, conn)
		var cancelled, production *jsonrpc.Request
		for _, m := range msgs { // in either order: they concern different requests
			switch r, _ := m.(*jsonrpc.Request); {
			case r != nil && r.Method == "notifications/cancelled":
				cancelled = r
			case r != nil && strings.Contains(string(r.Params), "production"):
				production = r
			}
		}
		if len(msgs) != 2 || cancelled == nil || production == nil {
			t.Fatalf("after the restart the client got %s; want the first question cancelled, and the second", onWire(msgs...))
		}
		var p struct {
			RequestID any `json:"requestId"`
		}
		json.Unmarshal(cancelled.Params, &p)
		if idKey(p.RequestID) != idKey(scratch.ID.Raw()) {
			t.Fatalf("the client got %s; want notifications/cancelled of request %v", onWire(cancelled), scratch.ID.Raw())
		}
		if production.ID == scratch.ID {
			t.Fatalf("both questions reached the client as request %v: its answers cannot be told apart", scratch.ID.Raw())
		}
		var wg sync.WaitGroup
		wg.Go(func() { // the user accepts the first question, then declines the second
			conn.Write(t.Context(), &jsonrpc.Response{ID: scratch.ID, Result: json.RawMessage(`{"action":"accept","content":{}}`)})
			conn.Write(t.Context(), &jsonrpc.Response{ID: production.ID, Result: json.RawMessage(`{"action":"decline"}`)})
		})
		got := second.next(t)
		if got["id"] != 0.0 || fmt.Sprint(got["result"]) != "map[action:decline]" {
			t.Fatalf("the new server got %v; want only the answer to its own question, declined", got)
		}
		wg.Wait()
	})
}

// TestServerCancellingItsRequestReachesTheClientUnderItsID: a server that
// cancels its own request to the client names it by its own ID; the
// client is told under the ID it was asked with, and its late answer is
// dropped.
func TestServerCancellingItsRequestReachesTheClientUnderItsID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted()
		conn, _ := New(s.upstream(), Options{}).Connect(t.Context())
		defer conn.Close()
		sc := <-s.starts
		initializeScripted(t, conn, sc)
		sc.send(elicit("delete repo scratch?"))
		sc.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0,"reason":"timed out"}}`)
		sc.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}}`) // never asked
		msgs := readFor(t, conn)
		if len(msgs) != 2 {
			t.Fatalf("the client got %s; want the question and its cancellation", onWire(msgs...))
		}
		asked := msgs[0].(*jsonrpc.Request)
		cancelled := msgs[1].(*jsonrpc.Request)
		var p struct {
			RequestID any    `json:"requestId"`
			Reason    string `json:"reason"`
		}
		json.Unmarshal(cancelled.Params, &p)
		if cancelled.Method != "notifications/cancelled" || idKey(p.RequestID) != idKey(asked.ID.Raw()) || p.Reason != "timed out" {
			t.Fatalf("the client got %v %s; want the cancellation of request %v", cancelled.Method, cancelled.Params, asked.ID.Raw())
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			conn.Write(t.Context(), &jsonrpc.Response{ID: asked.ID, Result: json.RawMessage(`{"action":"accept","content":{}}`)})
			ping, _ := jsonrpc.MakeID(float64(2))
			conn.Write(t.Context(), &jsonrpc.Request{ID: ping, Method: "ping", Params: json.RawMessage("{}")})
		})
		if got := sc.next(t); got["method"] != "ping" {
			t.Fatalf("the server got %v; want the ping, the late answer dropped", got)
		}
		wg.Wait()
	})
}
