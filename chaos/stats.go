package chaos

// Stats counts the requests a [Server] has served since it was created or
// last reset. A request is counted, under the outcome chosen for it, when it
// arrives; a slow request whose client goes away is still counted as 200.
// The tokens billed to a request (see Token usage) are counted when its
// answer ends.
//
// The counts of stream-cut, lost-reply and text mode are left out of the
// JSON while zero, so a server that never runs those modes reports only
// requests, by_status, the tokens and the tallies, as in
//
//	{"requests":3,"by_status":{"200":2,"429":1},
//	 "input_tokens":8,"output_tokens":10,
//	 "tallies":{"run-7":{"gpt-x":{"requests":2,"input_tokens":4,"output_tokens":5}},
//	            "":{"gpt-x":{"requests":1,"input_tokens":4,"output_tokens":5}}}}
//
// (on one line). A tally is {"requests":…,"input_tokens":…,"output_tokens":…}
// under its tally key, then its model.
type Stats struct {
	// Requests is the number of requests served, control requests excluded.
	Requests int `json:"requests"`
	// ByStatus counts requests by status code in decimal ("200", "429",
	// ...); dropped connections are counted under "reset". It is never nil.
	// A stream that stream-cut mode breaks counts as 200, as its status
	// went out; a reply lost-reply mode loses by dropping the connection
	// counts under "reset" and one it loses by coming late as 200.
	ByStatus map[string]int `json:"by_status"`

	// StreamsCompleted, StreamsCutInBand and StreamsCutAbort count the
	// streams served in stream-cut mode by how they ended: normally, with
	// the provider's in-band error event, or with the connection aborted. A
	// stream is counted when it ends; streams in other modes and requests
	// not asking for a stream are not counted.
	StreamsCompleted int `json:"streams_completed,omitempty"`
	StreamsCutInBand int `json:"streams_cut_inband,omitempty"`
	StreamsCutAbort  int `json:"streams_cut_abort,omitempty"`

	// Actions is the number of distinct actions performed in lost-reply
	// mode, and Duplicates the number of requests there answered from the
	// record of an earlier request with the same idempotency key.
	Actions    int `json:"actions,omitempty"`
	Duplicates int `json:"duplicates,omitempty"`

	// Continuations is the number of requests in text mode that continued
	// an answer from a prefix of it (see Text mode).
	Continuations int `json:"continuations,omitempty"`

	// InputTokens and OutputTokens are the tokens the server billed, in
	// all (see Token usage); InputTokens those of input read afresh.
	// CacheReadTokens and CacheWriteTokens are the input tokens it billed
	// as read from its prompt cache and written into it (see Prompt
	// cache), apart from InputTokens; they are left out of the JSON while
	// zero, as they are without Config.PromptCache.
	InputTokens      int `json:"input_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
	OutputTokens     int `json:"output_tokens"`
	// Tallies counts requests and billed tokens by tally key (the
	// HeaderTally header, "" for none), then by model (the body's "model";
	// in the gemini profile the one in the path; "" for none). Every
	// request counted in Requests is counted in exactly one tally, so the
	// tallies add up to Requests and the tokens (unless
	// the server was reset while a request was being answered). It is
	// never nil; see Token usage for its bounds.
	Tallies map[string]map[string]Tally `json:"tallies"`
	// Keys counts each API key's requests under its KeyLabel, while the
	// server holds keys to limits (Config.KeyRPM, KeyTPM,
	// KeysOutOfQuota); absent otherwise.
	Keys map[string]KeyStats `json:"keys,omitempty"`
}

// countStream counts a stream of stream-cut mode that ended as m says.
func (s *Server) countStream(m mishap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[m]++
}

// Stats returns the counts since the server was created or last reset.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Requests:         s.requests,
		ByStatus:         make(map[string]int, len(s.byStatus)),
		StreamsCompleted: s.streams[mishapNone],
		StreamsCutInBand: s.streams[mishapInBand],
		StreamsCutAbort:  s.streams[mishapAbort],
		Actions:          int(s.actions),
		Duplicates:       s.duplicates,
		Continuations:    s.continuations,
		InputTokens:      s.inputTokens,
		CacheReadTokens:  s.cacheRead,
		CacheWriteTokens: s.cacheWrite,
		OutputTokens:     s.outputTokens,
		Tallies:          make(map[string]map[string]Tally),
		Keys:             s.keyStats(),
	}
	for k, v := range s.byStatus {
		st.ByStatus[k] = v
	}
	for id, t := range s.tallies {
		models := st.Tallies[id.key]
		if models == nil {
			models = make(map[string]Tally)
			st.Tallies[id.key] = models
		}
		models[id.model] = *t
	}
	return st
}

// Reset zeroes the counts, sets the sequence number of the next request
// back to 0, so that the outcomes of a seeded run repeat, forgets every
// idempotency key, so that the next action is number 1 again, and empties
// the prompt cache.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = 0
	s.requests = 0
	clear(s.byStatus)
	s.streams = [mishapLate]int{}
	s.actions = 0
	s.duplicates = 0
	clear(s.keys)
	s.keyOrder = nil
	s.continuations = 0
	s.inputTokens = 0
	s.cacheRead, s.cacheWrite = 0, 0
	s.outputTokens = 0
	clear(s.tallies)
	clear(s.keyWindows)
	if s.cache != nil {
		s.cache.clear()
	}
}
