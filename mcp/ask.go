package reboundmcp

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The server's own requests to the client (sampling, elicitation, roots,
// ping) reach the client under IDs rebound gives them, from a counter of
// the session's, and the client's answers go back under the server's.
// A restarted server numbers its requests afresh: under the server's own
// IDs, the user's answer to a question the dead start asked ("delete repo
// scratch?", id 0) would reach the new start, asking its own question
// under the same id 0 ("delete repo production?"), and be acted on. Under
// rebound's, no two requests of a session share an ID, and an answer goes
// only to the start that asked: once that start has ended, it is dropped,
// and the client is told at the start's end that the questions it left
// open are void (notifications/cancelled), so that nobody waits on them.

// asked is a server's request to the client, awaiting the client's answer.
type asked struct {
	g  *generation
	id jsonrpc.ID // the server's own
}

// askClient returns the server's request req as the client is to see it,
// under an ID of the session's, and notes which start asked it; nil when
// that start has ended, and no answer could reach it.
func (s *session) askClient(g *generation, req *jsonrpc.Request) *jsonrpc.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.isDead() { // its end has cancelled what it asked: none would cancel this
		return nil
	}
	s.lastAsked++
	if s.asked == nil {
		s.asked = map[int64]asked{}
	}
	if g.asked == nil {
		g.asked = map[jsonrpc.ID]int64{}
	}
	s.asked[s.lastAsked] = asked{g: g, id: req.ID}
	g.asked[req.ID] = s.lastAsked
	out := *req
	out.ID, _ = jsonrpc.MakeID(float64(s.lastAsked))
	return &out
}

// answerServer takes the client's answer to a server's request back to
// the start that asked, under the server's ID; an answer to nothing
// asked, or to a start that has ended, is dropped.
func (s *session) answerServer(ctx context.Context, resp *jsonrpc.Response) {
	id, _ := resp.ID.Raw().(int64)
	s.mu.Lock()
	a, ok := s.asked[id]
	if ok {
		a.forget(s, id)
	}
	s.mu.Unlock()
	if !ok || a.g.isDead() {
		s.logDebug("mcp.answer_dropped", "id", resp.ID.Raw())
		return
	}
	answer := *resp // the client's is still read by its connection
	answer.ID = a.id
	if err := a.g.conn.Write(ctx, &answer); err != nil {
		s.logDebug("mcp.answer_lost", "error", err.Error())
	}
}

// forget drops the request the client knows as id; s.mu is held.
func (a asked) forget(s *session, id int64) {
	delete(s.asked, id)
	if a.g.asked[a.id] == id {
		delete(a.g.asked, a.id)
	}
}

// serverCancelled returns the server's cancellation of its own request
// msg as the client is to see it, naming the request by the ID the
// client knows it under, and forgets the request; nil when the client
// was never asked it (or has answered it).
func (s *session) serverCancelled(g *generation, msg *jsonrpc.Request) *jsonrpc.Request {
	var p map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &p) != nil {
		return nil
	}
	var raw any
	json.Unmarshal(p["requestId"], &raw)
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	cid, ok := g.asked[id]
	if ok {
		s.asked[cid].forget(s, cid)
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	p["requestId"], _ = json.Marshal(cid)
	out := *msg
	out.Params, _ = json.Marshal(p)
	return &out
}

// abandonAsked tells the client that the requests g asked and left
// unanswered are void: g has ended, and an answer would reach no one.
func (s *session) abandonAsked(g *generation) {
	s.mu.Lock()
	var ids []int64
	for _, cid := range g.asked {
		ids = append(ids, cid)
		delete(s.asked, cid)
	}
	g.asked = nil
	s.mu.Unlock()
	slices.Sort(ids)
	for _, cid := range ids {
		params, _ := json.Marshal(map[string]any{"requestId": cid, "reason": "reboundmcp: the MCP server that sent this request went down; its answer would reach no one"})
		if !s.toClient(&jsonrpc.Request{Method: "notifications/cancelled", Params: params}) {
			return
		}
	}
}
