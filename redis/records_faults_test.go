package reboundredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound/tool"
)

// actors returns a Registry for each of rs, with tool "act", a side effect
// whose output is out, counting its runs in actions.
func actors(rs []*Records, lease time.Duration, out string, actions *atomic.Int64) []*tool.Registry {
	regs := make([]*tool.Registry, len(rs))
	for i, rec := range rs {
		regs[i] = &tool.Registry{Records: rec, Lease: lease}
		regs[i].Register("act", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
			actions.Add(1)
			return out, nil
		})
	}
	return regs
}

// TestRecordsRedisRestartMidCall: Redis restarts, losing every key, while
// a side-effect call runs. Its record is written when it ends all the
// same, and the call made again, on its replica or another, is answered
// from it.
func TestRecordsRedisRestartMidCall(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.RetryEvery = 50 * time.Millisecond
	var actions atomic.Int64
	release := make(chan struct{})
	regs := make([]*tool.Registry, 2)
	for i, rec := range recordReplicas(t, cfg, 2) {
		regs[i] = &tool.Registry{Records: rec}
		regs[i].Register("pay", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
			actions.Add(1)
			<-release
			return "paid", nil
		})
	}
	call := tool.Call{ID: "call_pay", Name: "pay", Arguments: []byte(`{"usd":5}`)}
	done := make(chan tool.Result)
	go func() { done <- regs[0].Execute(context.Background(), call) }()
	for actions.Load() == 0 {
		time.Sleep(time.Millisecond) // real time: the call runs on a real Redis
	}
	srv.Stop()
	srv.Start()
	close(release)
	if res := <-done; res.Failure != nil {
		t.Fatal(res.Failure)
	}
	for i, reg := range regs {
		if res := reg.Execute(context.Background(), call); !res.Recorded || res.Output != "paid" {
			t.Errorf("replica %d, the call made again: recorded=%v output=%q; %d payments", i, res.Recorded, res.Output, actions.Load())
		}
	}
	if n := actions.Load(); n != 1 {
		t.Errorf("%d payments", n)
	}
}

// TestRecordsRenewalAfterRestart: a renewal that finds its key lost claims
// it again, so that no other replica claims it while the call runs; a key
// another holder has is not taken.
func TestRecordsRenewalAfterRestart(t *testing.T) {
	cfg := testConfig(t, redisURL())
	rs := recordReplicas(t, cfg, 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()
	c, _ := a.Claim(ctx, "k", time.Minute)
	cfg.Client.Del(ctx, a.store.key("call", "k")) // as a restart loses it
	if err := a.Extend(ctx, "k", c.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if other, _ := b.Claim(ctx, "k", time.Minute); other.Token != "" || other.Record != nil {
		t.Fatalf("another replica claimed a running call's key: %+v", other)
	}
	if err := b.Extend(ctx, "k", sharedToken+"stranger", time.Minute); !errors.Is(err, errNotHeld) {
		t.Fatalf("a stranger renewed another's claim: %v", err)
	}
}

// TestRecordsLargeOutput: a record of an output up to MaxOutput is written
// and read; a longer one is recorded as made without its output, and a
// repeat fails saying so instead of making the call again. Redis is never
// taken to be away. (The timeout of a round trip that carries a record
// grows with it: TestRecordsPayloadTimeoutGrowsWithTheRecord.)
func TestRecordsLargeOutput(t *testing.T) {
	for _, size := range []int{512 << 10, 8 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			cfg := testConfig(t, redisURL())
			var downs atomic.Int32
			var why atomic.Value
			cfg.OnChange = func(up bool, err error) {
				if !up {
					downs.Add(1)
					why.Store(fmt.Sprint(err))
				}
			}
			var actions atomic.Int64
			out := strings.Repeat("x", size)
			regs := actors(recordReplicas(t, cfg, 2), 300*time.Millisecond, out, &actions)
			call := tool.Call{ID: "call_big", Name: "act", Arguments: []byte(`{}`)}
			if res := regs[0].Execute(t.Context(), call); res.Failure != nil {
				t.Fatal(res.Failure)
			}
			res := regs[1].Execute(t.Context(), call)
			if n := actions.Load(); n != 1 || !res.Recorded {
				t.Errorf("made %d times; the repeat: recorded=%v failure=%v", n, res.Recorded, res.Failure)
			}
			switch {
			case size <= DefaultMaxOutput && res.Output != out:
				t.Errorf("a repeat's output: %d bytes, want %d", len(res.Output), size)
			case size > DefaultMaxOutput && (res.Failure == nil || !res.Failure.MayHaveTakenEffect || !strings.Contains(res.Failure.Error, "was made")):
				t.Errorf("a repeat of a call whose output was not kept: %+v", res.Failure)
			}
			if n := downs.Load(); n != 0 {
				t.Errorf("OnChange heard Redis go away %d times; it never did (%v)", n, why.Load())
			}
		})
	}
}

// TestRecordsOutputNotUTF8: an output that is not UTF-8 comes back from a
// record on Redis as it was made, as it does from MemoryRecords.
func TestRecordsOutputNotUTF8(t *testing.T) {
	out := "caf\xe9 \xff\xfe" // Latin-1 text, say
	var actions atomic.Int64
	regs := actors(recordReplicas(t, testConfig(t, redisURL()), 2), time.Second, out, &actions)
	call := tool.Call{ID: "call_latin1", Name: "act", Arguments: []byte(`{}`)}
	first := regs[0].Execute(t.Context(), call)
	again := regs[1].Execute(t.Context(), call)
	if !again.Recorded || again.Output != first.Output || first.Output != out {
		t.Errorf("answered from the record: %q (recorded %v); the run returned %q", again.Output, again.Recorded, first.Output)
	}
}

// TestRecordsStalledClaim: a claim that Redis, stalled, did not answer
// within the Store's Timeout was decided on this replica; when Redis runs
// it later, it does nothing, so another replica is not told that the call
// is in progress elsewhere when nothing runs it.
func TestRecordsStalledClaim(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	// A live Redis answers well within the Timeout, however busy the
	// machine; the stalled one makes the claim wait it out.
	cfg.Timeout, cfg.RetryEvery = time.Second, 50*time.Millisecond
	var actions atomic.Int64
	regs := actors(recordReplicas(t, cfg, 2), 2*time.Second, "done", &actions)
	regs[1].Wait = 300 * time.Millisecond
	regs[0].Execute(t.Context(), tool.Call{ID: "warm", Name: "act", Arguments: []byte(`{}`)}) // the scripts are loaded, the clock read
	call := tool.Call{ID: "call_x", Name: "act", Arguments: []byte(`{}`)}
	syscall.Kill(srv.cmd.Process.Pid, syscall.SIGSTOP)
	res := regs[0].Execute(t.Context(), call)
	syscall.Kill(srv.cmd.Process.Pid, syscall.SIGCONT)
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
	time.Sleep(200 * time.Millisecond) // real time: Redis runs what it was sent, and RetryEvery passes
	key := tool.IdempotencyKeyOf(call)
	if fields := cfg.Client.HGetAll(t.Context(), cfg.Prefix+"call:"+key).Val(); len(fields) != 0 {
		t.Errorf("the stalled claim was taken on Redis after its sender gave up: %v", fields)
	}
	if res := regs[1].Execute(t.Context(), call); errors.Is(res.Err, tool.ErrInProgress) {
		t.Errorf("another replica, Redis up, nothing running the call: %v", res.Err)
	}
}
