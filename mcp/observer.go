package reboundmcp

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
)

// guardObserver returns obs with its panics recovered: events reach it on
// the session's own goroutines (a call's, the supervisor's, the server's
// reader), where a panic would end the program rather than reach anyone
// who could recover it. A panic is logged to log, if not nil, and the
// event dropped. A CallObserver stays one, its per-call Observers guarded
// too. A nil obs stays nil.
func guardObserver(obs rebound.Observer, log *slog.Logger) rebound.Observer {
	if obs == nil {
		return nil
	}
	g := guardedObserver{obs: obs, log: log}
	if co, ok := obs.(rebound.CallObserver); ok {
		return guardedCallObserver{g, co}
	}
	return g
}

type guardedObserver struct {
	obs rebound.Observer
	log *slog.Logger
}

func (g guardedObserver) Observe(e rebound.Event) {
	defer g.recovered()
	g.obs.Observe(e)
}

// RecordOperation passes op on to the observer if it records Operations
// (observe.OperationRecorder), as reboundotel's does.
func (g guardedObserver) RecordOperation(ctx context.Context, op observe.Operation) {
	if r, ok := g.obs.(observe.OperationRecorder); ok {
		defer g.recovered()
		r.RecordOperation(ctx, op)
	}
}

// recovered logs a panic of the observer's, if there was one.
func (g guardedObserver) recovered() {
	if v := recover(); v != nil && g.log != nil {
		g.log.Error("mcp.observer_panic", "panic", fmt.Sprint(v))
	}
}

type guardedCallObserver struct {
	guardedObserver
	co rebound.CallObserver
}

// ObserveCall guards the call's Observer; if asking for it panics, the
// call's events go to the guarded Observer itself.
func (g guardedCallObserver) ObserveCall(ctx context.Context) (o rebound.Observer) {
	o = g.guardedObserver
	defer g.recovered()
	return guardObserver(g.co.ObserveCall(ctx), g.log)
}
