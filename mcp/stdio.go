package reboundmcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// termGrace is how long a child's process group has between SIGTERM and
// SIGKILL.
const termGrace = 2 * time.Second

// child is one start of a stdio server: the SDK's newline-delimited JSON
// connection over the pipes, and the process group it runs in.
type child struct {
	mcp.Connection
	cmd          *exec.Cmd
	exited       chan struct{} // closed when the leader has been waited for
	stdin        *os.File
	writeTimeout time.Duration // 0: none
	writeMu      sync.Mutex    // one write, and its deadline, at a time
}

// startChild starts a copy of tmpl in a process group of its own. A write
// to it that does not finish within writeTimeout (0: none) ends it.
func startChild(_ context.Context, tmpl *exec.Cmd, writeTimeout time.Duration) (mcp.Connection, error) {
	cmd := exec.Command(tmpl.Path, tmpl.Args[1:]...)
	cmd.Args = tmpl.Args
	cmd.Env, cmd.Dir, cmd.Stderr = tmpl.Env, tmpl.Dir, tmpl.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	// Stderr that is not a file is copied by a goroutine of exec's, which
	// Wait would wait for as long as a grandchild holds the pipe: the
	// group is killed only once Wait returns.
	cmd.WaitDelay = termGrace
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	c := &child{cmd: cmd, exited: make(chan struct{}), stdin: inW, writeTimeout: writeTimeout}
	started := make(chan error)
	go c.run(started)
	err = <-started
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	// The pipes are polled by the runtime: closing outR ends a Read.
	c.Connection = NewLineConn(outR, inW)
	return c, nil
}

// run starts the child, says on started whether it could, and waits for
// it, all on one OS thread, held for as long as the child lives. Linux
// sends the parent-death signal (dieWithParent) when the thread that
// started the child ends, not the process; and a thread of Go's ends
// when a goroutine locked to it exits, which any goroutine of the
// program may do, including the one that asked for this start. A thread
// locked here ends only once the child has been waited for.
func (c *child) run(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := c.cmd.Start()
	started <- err
	if err != nil {
		return
	}
	c.cmd.Wait()
	// The leader is gone: whatever it left in its group goes too, so
	// that the pipe ends and the next start owns the server alone.
	syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	close(c.exited)
}

// Read reads the next message from the server; once the child has exited
// and its output is drained, it returns the child's end.
//
// A line that is not JSON-RPC (a banner, a log line, JSON that is no
// message) is skipped, as clients made for such servers skip it: taking it
// for the server's end would restart it until the breaker opened.
func (c *child) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	for le := (*lineError)(nil); errors.As(err, &le) && ctx.Err() == nil; {
		msg, err = c.Connection.Read(ctx)
	}
	if err != nil && ctx.Err() == nil {
		return nil, errors.Join(errServerExited, err)
	}
	return msg, err
}

// Write sends msg to the server. A server that stops reading its stdin
// fills the pipe, and a write would then wait forever, and every write
// queued behind it: a write that does not finish within writeTimeout kills
// the server, whose calls are then judged as cut short (the line was cut,
// so the server took none of it).
func (c *child) Write(ctx context.Context, msg jsonrpc.Message) error {
	if c.writeTimeout <= 0 {
		return c.Connection.Write(ctx, msg)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.stdin.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	err := c.Connection.Write(ctx, msg)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		err = fmt.Errorf("%w: it read none of its input for %v", errServerStuck, c.writeTimeout)
	}
	return err
}

// Close ends the child's whole process group: SIGTERM, then SIGKILL after
// termGrace, and waits for the leader.
func (c *child) Close() error {
	c.Connection.Close()
	c.kill()
	return nil
}

func (c *child) kill() {
	pgid := -c.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(termGrace):
	}
	syscall.Kill(pgid, syscall.SIGKILL)
	<-c.exited
}

var (
	errServerExited = errors.New("the server process exited")
	errServerStuck  = errors.New("the server process stopped reading and was killed")
)

// errNotSent is a request's write to a server that had already gone (its
// process exited, or its session was lost): the request never left, and
// is sent again, whatever it is, to the next one.
var errNotSent = errors.New("the server was gone before the request was sent")
