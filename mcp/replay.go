package reboundmcp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/internal/jsonscan"
)

// replayState is what a restart gives a new server so that the client's
// session goes on as it was, and what rebound last saw listed.
type replayState struct {
	initParams   json.RawMessage // the client's initialize, once answered
	initialized  bool            // the client sent notifications/initialized
	discoverMeta json.RawMessage // the _meta of a stateless client's server/discover
	subs         map[string]bool // resources subscribed to, by URI
	logLevel     json.RawMessage // the params of the last logging/setLevel answered

	tools   map[string]*mcp.ToolAnnotations // as last listed
	listed  [len(lists)]string              // a digest of each list, "" before the first
	listing bool                            // a listing runs
	again   bool                            // list again once it ends
	listEnd chan struct{}                   // closed when the listing running ends
}

// lists are the lists whose change a client is told of.
var lists = [...]struct{ method, key, changed string }{
	{"tools/list", "tools", "notifications/tools/list_changed"},
	{"prompts/list", "prompts", "notifications/prompts/list_changed"},
	{"resources/list", "resources", "notifications/resources/list_changed"},
}

// maxListPages bounds the pages of one list, against a server whose
// cursors never end.
const maxListPages = 100

// replayTimeout bounds a restart's replay when the idle timeout does not.
const replayTimeout = time.Minute

// replay gives a new server the client's session: initialize with the
// client's own params, notifications/initialized, the subscriptions and
// the log level; then lists what it offers, telling the client of any
// list that changed.
func (s *session) replay(g *generation) error {
	s.mu.Lock()
	st := s.state
	subs := make([]string, 0, len(st.subs))
	for uri := range st.subs {
		subs = append(subs, uri)
	}
	s.mu.Unlock()
	if st.initParams == nil && st.discoverMeta == nil {
		return nil // the client has not begun; its own initialize will
	}
	ctx, cancel := context.WithTimeout(s.ctx, orDefault(s.o.idleTimeout(), replayTimeout))
	defer cancel()
	if st.initParams != nil {
		if _, err := g.call(ctx, "initialize", st.initParams); err != nil {
			return err
		}
		if st.initialized {
			if err := g.notify(ctx, "notifications/initialized", struct{}{}); err != nil {
				return err
			}
		}
	}
	for _, uri := range subs {
		if _, err := g.call(ctx, "resources/subscribe", s.withMeta(map[string]any{"uri": uri})); err != nil {
			return err
		}
	}
	if st.logLevel != nil {
		if _, err := g.call(ctx, "logging/setLevel", st.logLevel); err != nil {
			return err
		}
	}
	if st.initialized || st.discoverMeta != nil {
		s.listOnce(ctx, g, true)
	}
	return nil
}

// relist lists what g offers in a goroutine of the session's, unless a
// listing runs already: that one lists again when it ends, so that a flood
// of list_changed costs one listing at a time.
func (s *session) relist(g *generation, announce bool) {
	s.mu.Lock()
	if s.state.listing {
		s.state.again = true
		s.mu.Unlock()
		return
	}
	s.state.listing = true
	s.state.listEnd = make(chan struct{})
	s.mu.Unlock()
	ok := s.spawn(func() {
		for {
			ctx, cancel := context.WithTimeout(s.ctx, orDefault(s.o.idleTimeout(), replayTimeout))
			s.listOnce(ctx, g, announce)
			cancel()
			s.mu.Lock()
			if !s.state.again || g.isDead() {
				s.state.listing, s.state.again = false, false
				close(s.state.listEnd)
				s.mu.Unlock()
				return
			}
			s.state.again = false
			s.mu.Unlock()
		}
	})
	if !ok {
		s.mu.Lock()
		s.state.listing = false
		close(s.state.listEnd)
		s.mu.Unlock()
	}
}

// listOnce lists g's tools (keeping their annotations), prompts and
// resources, each across all its pages, and, if announce, tells the client
// of each list that differs from the one listed before.
func (s *session) listOnce(ctx context.Context, g *generation, announce bool) {
	var digests [len(lists)]string
	var tools map[string]*mcp.ToolAnnotations
	for i, l := range lists {
		items, err := s.listAllPages(ctx, g, l.method, l.key)
		if err != nil {
			s.logDebug("mcp.list_failed", "method", l.method, "error", err.Error())
			continue // a server without prompts says so; its digest stays unknown
		}
		h := sha256.New()
		for _, it := range items {
			h.Write(it)
			h.Write([]byte{0})
		}
		digests[i] = string(h.Sum(nil))
		if l.key == "tools" {
			tools = annotations(items)
		}
	}
	s.mu.Lock()
	if tools != nil {
		s.state.tools = tools
	}
	var changed []string
	for i, d := range digests {
		if d == "" {
			continue
		}
		if announce && s.state.listed[i] != "" && s.state.listed[i] != d {
			changed = append(changed, lists[i].changed)
		}
		s.state.listed[i] = d
	}
	s.mu.Unlock()
	for _, method := range changed {
		s.logInfo("mcp.list_changed", "notification", method)
		s.toClient(notification(method))
	}
}

// listAllPages returns the items of one list, following its cursors.
func (s *session) listAllPages(ctx context.Context, g *generation, method, key string) ([]json.RawMessage, error) {
	var items []json.RawMessage
	cursor := ""
	for range maxListPages {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := g.call(ctx, method, s.withMeta(params))
		if err != nil {
			return nil, err
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, err
		}
		var these []json.RawMessage
		json.Unmarshal(page[key], &these) // a page without the list adds nothing
		items = append(items, these...)
		cursor = ""
		json.Unmarshal(page["nextCursor"], &cursor)
		if cursor == "" {
			return items, nil
		}
	}
	return items, nil
}

// withMeta adds the _meta of a stateless client's server/discover to
// params of rebound's own requests, so that the server takes them as the
// client's.
func (s *session) withMeta(params map[string]any) map[string]any {
	s.mu.Lock()
	meta := s.state.discoverMeta
	s.mu.Unlock()
	if meta != nil {
		params = maps.Clone(params)
		params["_meta"] = meta
	}
	return params
}

// The names a listed tool is read by, and its annotations'.
var (
	toolNames       = jsonscan.NewNames("name", "annotations")
	annotationNames = jsonscan.NewNames("readOnlyHint", "idempotentHint")
)

// annotations returns the annotations of the tools items list, by name,
// read by jsonscan's rules: a tool that gives a name twice, or spells one
// another way ("Name", "ReadOnlyHint"), or whose hints are not booleans,
// is left out, and so is sent again as a tool nothing is known of.
func annotations(items []json.RawMessage) map[string]*mcp.ToolAnnotations {
	tools := make(map[string]*mcp.ToolAnnotations, len(items))
	var s jsonscan.Scanner
	for _, it := range items {
		s.Reset(it)
		if s.Next() != jsonscan.Object {
			continue
		}
		var name string
		a, ok := &mcp.ToolAnnotations{}, true
		for m := s.Object(toolNames); m.Next(); {
			switch {
			case m.Name() == 0:
				v, isString := s.Str()
				ok = ok && isString
				if isString {
					name = string(s.Text(nil, v))
				}
			case m.Name() == 1 && s.Next() == jsonscan.Object:
				for h := s.Object(annotationNames); h.Next(); {
					switch k := s.Next(); {
					case h.Name() == jsonscan.Other || k == jsonscan.Null:
						s.Skip()
					case k == jsonscan.True || k == jsonscan.False:
						if h.Name() == 0 {
							a.ReadOnlyHint = k == jsonscan.True
						} else {
							a.IdempotentHint = k == jsonscan.True
						}
						s.Skip()
					default:
						s.Skip()
						ok = false
					}
				}
			case m.Name() == 1 && s.Next() != jsonscan.Null:
				s.Skip()
				ok = false
			default:
				s.Skip()
			}
		}
		if s.End() && ok && name != "" {
			tools[name] = a
		}
	}
	return tools
}
