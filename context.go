package rebound

import "context"

type sideEffectsKey struct{}

// WithSideEffects marks the calls made with the returned context as having
// side effects (sending a message, appending to a file, charging a card): a
// timeout does not mean nothing happened, so such a call is attempted
// once, whatever its error. Do and Stream cannot know what a function did
// before it failed, even with a failure to connect; Transport makes an
// attempt again when it provably never reached the server (see
// Transport.SideEffects).
func WithSideEffects(ctx context.Context) context.Context {
	return context.WithValue(ctx, sideEffectsKey{}, true)
}

// HasSideEffects reports whether ctx carries the WithSideEffects mark.
func HasSideEffects(ctx context.Context) bool {
	marked, _ := ctx.Value(sideEffectsKey{}).(bool)
	return marked
}

type targetKey struct{}

// WithTarget names the target of the calls made with the returned context
// ("gpt-x:summarise", say): events, logs and metrics carry it.
func WithTarget(ctx context.Context, target string) context.Context {
	return context.WithValue(ctx, targetKey{}, target)
}

// TargetFrom returns the target named by WithTarget, or "".
func TargetFrom(ctx context.Context) string {
	t, _ := ctx.Value(targetKey{}).(string)
	return t
}
