package reboundmcp

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/tool"
)

func TestReadOnlyCallCutByACrashIsResentToTheRestartedServer(t *testing.T) {
	for _, legacy := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(t)
			f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
				if run == 1 {
					return crashMidCall(ctx, f)
				}
				return "read #2", nil
			}
			var logs logBuffer
			cs := connect(t, f, Options{Logger: logs.logger()}, legacy, nil)
			got, err := callText(t, cs, "read")
			if err != nil || got != "read #2" {
				t.Fatalf("legacy=%v: got %q, %v; want read #2", legacy, got, err)
			}
			cs.Close()
			if n := len(f.startTimes()); n != 2 {
				t.Errorf("%d starts, want 2", n)
			}
			reqs := logs.requests(t)
			last := reqs[len(reqs)-1]
			if last["tool"] != "read" || last["attempts"] != 2.0 || last["restarted"] != true || last["outcome"] != "ok" {
				t.Errorf("log line %v", last)
			}
		})
	}
}

func TestSideEffectingCallInFlightWhenTheServerDiesRunsOnceAndTheCallerIsTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			return crashMidCall(ctx, f)
		}
		cs := connect(t, f, Options{}, true, nil)
		_, err := callText(t, cs, "write")
		if err == nil || !strings.Contains(err.Error(), `"write"`) || !strings.Contains(err.Error(), "may have taken effect") {
			t.Fatalf("err = %v; want one naming the tool and saying it may have taken effect", err)
		}
		synctest.Wait()
		if n := f.runsOf("write"); n != 1 {
			t.Errorf("write ran %d times, want 1", n)
		}
		cs.Close()
	})
}

// TestToolKindsOverrideTheAnnotations: Options.Tools decides whether a
// call cut by a crash is resent; its zero Kind, tool.Unknown, leaves the
// tool to its annotations, and a tool without them (write) to one run.
func TestToolKindsOverrideTheAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name, tool string
		o          Options
		runs       int
	}{
		{"idempotent annotation", "idem", Options{}, 2},
		{"override makes write idempotent", "write", Options{Tools: map[string]tool.Kind{"write": tool.Idempotent}}, 2},
		{"override makes read side-effecting", "read", Options{Tools: map[string]tool.Kind{"read": tool.SideEffects}}, 1},
		{"annotations ignored", "read", Options{IgnoreAnnotations: true}, 1},
		{"annotations ignored, override kept", "write", Options{IgnoreAnnotations: true, Tools: map[string]tool.Kind{"write": tool.ReadOnly}}, 2},
		{"zero kind, no annotations", "write", Options{Tools: map[string]tool.Kind{"write": tool.Unknown}}, 1},
		{"zero kind, annotations ignored", "read", Options{IgnoreAnnotations: true, Tools: map[string]tool.Kind{"read": tool.Unknown}}, 1},
		{"zero kind, read-only annotation", "read", Options{Tools: map[string]tool.Kind{"read": tool.Unknown}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(t)
				f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
					if run == 1 {
						return crashMidCall(ctx, f)
					}
					return "done", nil
				}
				cs := connect(t, f, tc.o, true, nil)
				synctest.Wait() // the tools are listed
				_, err := callText(t, cs, tc.tool)
				synctest.Wait()
				if n := f.runsOf(tc.tool); n != tc.runs {
					t.Errorf("%s ran %d times (err %v), want %d", tc.tool, n, err, tc.runs)
				}
				if (tc.runs == 1) != (err != nil) {
					t.Errorf("err = %v", err)
				}
				cs.Close()
			})
		})
	}
}

func TestIdleCallIsCancelledAtTheServerAndAnsweredWithAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			<-ctx.Done()
			f.mu.Lock()
			f.cancels++
			f.mu.Unlock()
			return "", ctx.Err()
		}
		cs := connect(t, f, Options{IdleTimeout: 5 * time.Second}, true, nil)
		start := time.Now()
		_, err := callText(t, cs, "slow")
		if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "no answer and no progress") || took != 5*time.Second {
			t.Fatalf("after %v: err = %v", took, err)
		}
		synctest.Wait()
		if f.cancels != 1 {
			t.Errorf("the server's handler saw %d cancellations, want 1", f.cancels)
		}
		cs.Close()
	})
}
