package chaos

import (
	"crypto/sha256"
	"net/http"
)

// maxKeys is how many idempotency keys a server remembers at most.
const maxKeys = 16384

// act answers c, a request in lost-reply mode: it performs the request's
// action, unless its idempotency key is on record, and replies with the
// action's number, or loses the reply as c's mishap says.
func (s *Server) act(w http.ResponseWriter, r *http.Request, c *call) {
	action := s.perform(r.Header.Get(HeaderIdempotencyKey))
	switch {
	case c.mishap == mishapAbort:
		drop(w)
		return
	case c.mishap == mishapLate && !s.wait(r.Context()):
		return
	}
	c.setID(w.Header())
	writeJSON(w, http.StatusOK, actionBody{OK: true, Action: action})
}

// perform performs an action for a request with the given idempotency key
// ("" for none) and returns its number. If the key is on record it performs
// nothing and returns the number recorded; otherwise it records the new
// action under the key, forgetting the oldest key if it already remembers
// maxKeys of them.
func (s *Server) perform(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		s.actions++
		return s.actions
	}
	// A digest keeps each record small however long the key.
	k := sha256.Sum256([]byte(key))
	if action, ok := s.keys[k]; ok {
		s.duplicates++
		return action
	}
	s.actions++
	if len(s.keyOrder) == maxKeys {
		delete(s.keys, s.keyOrder[0])
		s.keyOrder = s.keyOrder[1:]
	}
	s.keys[k] = s.actions
	s.keyOrder = append(s.keyOrder, k)
	return s.actions
}

type actionBody struct {
	OK     bool   `json:"ok"`
	Action uint64 `json:"action"`
}
