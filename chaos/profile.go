package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/usage"
)

// A profile is the wire format of one provider: how it words each fault,
// where it puts a wait hint, which headers it adds and how it answers a
// success.
type profile struct {
	name  string
	model string // the model a success names when the request names none

	// errors words every fault but faultNone and faultReset.
	errors map[fault]apiError
	// errorBody returns the JSON body of e, a failure of c.
	errorBody func(e apiError, c *call) any
	// errorHeaders, if set, adds the headers of a failure e.
	errorHeaders func(h http.Header, e apiError)
	// hint sets the headers of a wait hint of secs seconds; nil if the
	// hint goes in the error body or is never sent.
	hint func(h http.Header, secs int64)
	// idHeader is the header that carries the request id, if any.
	idHeader string
	// limits sets the rate-limit headers that announce q; nil for none.
	limits func(h http.Header, q quotas)
	// quotas and exhausted are what limits announces by default: after a
	// success, and in retryafter mode (its reset the wait hint's).
	quotas, exhausted quotas
	// success answers c with a success.
	success func(w http.ResponseWriter, r *http.Request, c *call)
	// dialect returns the dialect a success to a request for path
	// reports its usage in; nil for a profile that reports none.
	dialect func(path string) *usage.Dialect
}

// quotas are the rate limits a profile's headers announce. A limit of
// zero is not announced.
type quotas struct {
	requestsLimit, requestsLeft int64
	tokensLimit, tokensLeft     int64
	reset                       time.Duration // until both are replenished
}

// An apiError is a failure as a profile words it. What code and typ mean
// depends on the profile.
type apiError struct {
	status int
	// typ is the error type; for gemini, the status name.
	typ string
	// code is the error code in plain (the mode if empty) and openai; for
	// anthropic, the details' error_code; for gemini, the quota id of a
	// QuotaFailure detail. Empty means none.
	code    string
	param   string // openai only; empty means null
	message string
}

// profiles lists every profile, in the order error messages name them.
var profiles = []*profile{plain, openAI, anthropic, gemini, azure, bedrock, local}

func profileNamed(name string) *profile {
	for _, p := range profiles {
		if p.name == name {
			return p
		}
	}
	return nil
}

func unknownProfileError(name string) error {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.name
	}
	return fmt.Errorf("chaos: unknown profile %q (want %s)", name, strings.Join(names, ", "))
}

// status returns the status p answers f with; f is not faultReset.
func (p *profile) status(f fault) int {
	if f == faultNone {
		return http.StatusOK
	}
	return p.errors[f].status
}

// object is a JSON object of a success body.
type object = map[string]any

// nullable returns nil for "", which encodes as null, and &s otherwise.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the client hung up if this fails; nothing to do
}
