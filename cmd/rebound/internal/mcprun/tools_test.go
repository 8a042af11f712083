package mcprun

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestToolFilterRefusesOtherToolsAndCutsTheList: a caller given echo has
// a call of add answered with an error naming add and the call's id, never
// passed on, and its tools/list answer cut down to echo; a caller given
// all tools (nil) has both passed on untouched.
func TestToolFilterRefusesOtherToolsAndCutsTheList(t *testing.T) {
	var f toolFilter
	w := httptest.NewRecorder()
	if f.admit(w, msg(t, []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{}}}`)), []string{"echo"}) == nil {
		t.Fatal("a call of add passed")
	}
	if want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"tool \"add\" is not one this caller may use"}}` + "\n"; w.Body.String() != want || w.Code != 200 {
		t.Errorf("answer %d %s, want 200 %s", w.Code, w.Body, want)
	}
	if f.admit(httptest.NewRecorder(), msg(t, []byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"}}`)), []string{"echo"}) != nil {
		t.Error("a call of echo was refused")
	}
	if f.admit(httptest.NewRecorder(), msg(t, []byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add"}}`)), nil) != nil {
		t.Error("a caller given all tools was refused add")
	}
	list := []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	if f.admit(httptest.NewRecorder(), msg(t, list), []string{"echo"}) != nil {
		t.Fatal("tools/list refused")
	}
	id, _ := jsonrpc.MakeID("l")
	resp := &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"tools":[{"name":"add"},{"name":"echo","title":"Echo"}],"nextCursor":"c"}`)}
	f.answer(resp)
	if want := `{"nextCursor":"c","tools":[{"name":"echo","title":"Echo"}]}`; string(resp.Result) != want {
		t.Errorf("tools/list answer %s, want %s", resp.Result, want)
	}
	again := &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"tools":[{"name":"add"},{"name":"echo"}]}`)}
	if f.answer(again); string(again.Result) != `{"tools":[{"name":"echo"}]}` {
		t.Errorf("an answer listing tools, to no tools/list in flight, of a limited caller's session: %s, want it cut all the same", again.Result)
	}
	pong := &jsonrpc.Response{ID: id, Result: json.RawMessage(`{}`)}
	if f.answer(pong); string(pong.Result) != `{}` {
		t.Errorf("an answer that lists no tools was changed: %s", pong.Result)
	}
	var all toolFilter
	whole := &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"tools":[{"name":"add"}]}`)}
	all.admit(httptest.NewRecorder(), msg(t, list), nil)
	if all.answer(whole); string(whole.Result) != `{"tools":[{"name":"add"}]}` {
		t.Errorf("a caller given all tools had its list changed: %s", whole.Result)
	}
}

// TestToolFilterKeepsNoListBeyondItsPOST: what the filter keeps for a
// tools/list is dropped once its POST has ended, answered or not; and an
// answer of another request under the list's ID (a ping, answered first)
// does not take it: the list's answer is still cut.
func TestToolFilterKeepsNoListBeyondItsPOST(t *testing.T) {
	var f toolFilter
	list := msg(t, []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`))
	f.admit(httptest.NewRecorder(), list, []string{"echo"})
	id, _ := jsonrpc.MakeID(float64(5))
	f.answer(&jsonrpc.Response{ID: id, Result: json.RawMessage(`{}`)}) // a ping's
	resp := &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"tools":[{"name":"add"},{"name":"echo"}]}`)}
	if f.answer(resp); string(resp.Result) != `{"tools":[{"name":"echo"}]}` {
		t.Errorf("the list's answer after a ping of its ID: %s", resp.Result)
	}
	for range 100 {
		f.admit(httptest.NewRecorder(), list, []string{"echo"})
		f.forget(list) // its transport refused it: no answer comes
	}
	if len(f.lists) != 0 {
		t.Errorf("%d lists kept after their POSTs ended", len(f.lists))
	}
}

// TestToolFilterReadsTheNameAsTheServerDoes: a caller given echo cannot
// pass a call of another tool by naming echo a second time, under another
// spelling, which a reader that folds case would take and the server
// would not: such a call is refused as invalid (-32600), never passed on;
// an escaped spelling of echo is echo.
func TestToolFilterReadsTheNameAsTheServerDoes(t *testing.T) {
	var f toolFilter
	for _, params := range []string{
		`{"name":"get-env","NAME":"echo"}`,
		`{"Name":"echo","name":"get-env"}`,
		`{"name":"echo","name":"get-env"}`,
	} {
		w := httptest.NewRecorder()
		if f.admit(w, msg(t, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`)), []string{"echo"}) == nil {
			t.Errorf("%s passed", params)
			continue
		}
		var answer struct {
			Error struct{ Code int } `json:"error"`
		}
		if json.Unmarshal(w.Body.Bytes(), &answer); answer.Error.Code != jsonrpc.CodeInvalidRequest {
			t.Errorf("%s: %s, want a -32600 error", params, w.Body)
		}
	}
	if f.admit(httptest.NewRecorder(), msg(t, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"\u0065cho"}}`)), []string{"echo"}) != nil {
		t.Error(`"\u0065cho" was refused`)
	}
}

// msg decodes data, a JSON-RPC message.
func msg(t *testing.T, data []byte) jsonrpc.Message {
	t.Helper()
	m, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
