package reboundmcp

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServerOutlivesTheThreadThatStartedIt: Linux's parent-death signal
// comes when the thread that started a child ends, not the process, and
// a thread of Go's ends when a goroutine locked to it exits. A server
// started by such a goroutine still serves once its thread is gone.
func TestServerOutlivesTheThreadThatStartedIt(t *testing.T) {
	cmd, _ := childCommand(t, "serve")
	type started struct {
		conn mcp.Connection
		tid  int
		err  error
	}
	ch := make(chan started)
	locked := make(chan struct{})
	start := func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		close(locked)
		conn, err := startChild(t.Context(), cmd, 0)
		ch <- started{conn, syscall.Gettid(), err}
	}
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != os.Getpid() {
			start()
			return
		}
		// The main thread, which Go never ends: held until the start runs
		// on another, which does end.
		go start()
		<-locked
		runtime.UnlockOSThread()
	}()
	st := <-ch
	if st.err != nil {
		t.Fatal(st.err)
	}
	defer st.conn.Close()
	task := fmt.Sprintf("/proc/self/task/%d", st.tid)
	limit := time.After(10 * time.Second)
	for _, err := os.Stat(task); err == nil; _, err = os.Stat(task) {
		select {
		case <-limit:
			t.Fatalf("thread %d did not end with its locked goroutine", st.tid)
		case <-time.After(time.Millisecond):
		}
	}
	id, _ := jsonrpc.MakeID(float64(1))
	err := st.conn.Write(t.Context(), &jsonrpc.Request{ID: id, Method: "initialize", Params: []byte(`{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)})
	var msg jsonrpc.Message
	if err == nil {
		msg, err = st.conn.Read(t.Context())
	}
	if r, ok := msg.(*jsonrpc.Response); err != nil || !ok || r.Error != nil {
		t.Fatalf("the server died with the thread that started it: initialize got %v, %v", msg, err)
	}
}
