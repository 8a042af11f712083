package reboundmcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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
	cmd    *exec.Cmd
	exited chan struct{} // closed when the leader has been waited for

	divert io.Writer // where what is skipped of its stdout is told

	stdin        *os.File
	writeTimeout time.Duration // 0: none
	writeMu      sync.Mutex    // a write's deadline is its own
}

// startChild starts a copy of tmpl in a process group of its own. A write
// to it that does not finish within writeTimeout (0: none) ends it.
func startChild(_ context.Context, tmpl *exec.Cmd, writeTimeout time.Duration) (mcp.Connection, error) {
	cmd := exec.Command(tmpl.Path, tmpl.Args[1:]...)
	cmd.Args = tmpl.Args
	cmd.Env, cmd.Dir, cmd.Stderr = tmpl.Env, tmpl.Dir, tmpl.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	c := &child{cmd: cmd, exited: make(chan struct{}), divert: divertTo(tmpl.Stderr), stdin: inW, writeTimeout: writeTimeout}
	// The SDK's IOTransport cannot fail to connect.
	stdout := struct {
		io.Reader
		io.Closer
	}{skipNonJSON(outR, c.divert), outR}
	c.Connection, _ = (&mcp.IOTransport{Reader: stdout, Writer: inW}).Connect(context.Background())
	go func() {
		cmd.Wait()
		// The leader is gone: whatever it left in its group goes too, so
		// that the pipe ends and the next start owns the server alone.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(c.exited)
	}()
	return c, nil
}

// Read reads the next message from the server, skipping the JSON values
// that are not messages (a log line in JSON); once the child has exited
// and its output is drained, it returns the child's end.
func (c *child) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil && ctx.Err() == nil && notAMessage(err) {
			fmt.Fprintf(c.divert, "reboundmcp: skipped a value on the server's stdout: %v\n", err)
			continue
		}
		if err != nil && ctx.Err() == nil {
			return nil, errors.Join(errServerExited, err)
		}
		return msg, err
	}
}

// notAMessage says whether err, from the SDK's reading of the server's
// output, is about one JSON value that is not a JSON-RPC message, after
// which the stream goes on, rather than about the stream (JSON broken, a
// line over the limit, its end), after which nothing more can be read.
// An error it does not know is the stream's: the server is restarted,
// where skipping would wait on a stream that has ended.
func notAMessage(err error) bool {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code == jsonrpc.CodeInvalidRequest {
		return true
	}
	m := err.Error()
	return strings.HasPrefix(m, "unmarshaling jsonrpc message") || strings.HasPrefix(m, "invalid message version tag") ||
		m == "empty batch" || strings.HasPrefix(m, "JSON-RPC batching is not supported")
}

// Write sends msg to the server. A server that stops reading its stdin
// fills the pipe, and a write into it would wait for ever, holding up
// every write after it, with no idle timeout running yet: a write that
// does not finish within the write timeout kills the group instead. Its
// line is cut short, so the server took none of it, and its end makes
// every call waiting on it judged as cut by a crash.
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

// skipNonJSON returns r without its lines that cannot be JSON-RPC (those
// that start, after spaces, with neither '{' nor a batch's "[{"): a banner or a
// log line a server prints to stdout, which the SDK's decoder, reading
// one stream of JSON values, would fail on for good, so that a server
// that works with clients that skip such lines would be restarted until
// its breaker opened. The lines skipped go to divert.
func skipNonJSON(r io.Reader, divert io.Writer) io.Reader {
	return &jsonLines{r: bufio.NewReaderSize(r, 64<<10), divert: divert}
}

// divertTo is where what is skipped of a server's stdout goes: the
// server's stderr, if it is a file (another writer is written by exec's
// own goroutine, which a write of ours would race).
func divertTo(stderr io.Writer) io.Writer {
	if f, ok := stderr.(*os.File); ok {
		return f
	}
	return io.Discard
}

// jsonLines is skipNonJSON's reader. It never holds a whole line: the
// first piece of a line decides whether the line is passed on.
type jsonLines struct {
	r       *bufio.Reader
	divert  io.Writer
	pending []byte // of the line being passed on, not yet read
	err     error  // the underlying reader's, once pending is read
	midLine bool   // the last piece did not end its line
	skip    bool   // the line in progress is skipped
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.pending) == 0 {
		if j.err != nil {
			return 0, j.err
		}
		piece, err := j.r.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			j.err = err
		}
		if !j.midLine {
			j.skip = !mayBeJSONRPC(piece)
		}
		j.midLine = len(piece) > 0 && piece[len(piece)-1] != '\n'
		if j.skip {
			j.divert.Write(piece)
			continue
		}
		j.pending = piece
	}
	n := copy(p, j.pending)
	j.pending = j.pending[n:]
	return n, nil
}

// mayBeJSONRPC says whether a line that starts with piece may be a
// JSON-RPC message or batch: a blank line may (it is only space between
// values); "[info] ready" may not.
func mayBeJSONRPC(piece []byte) bool {
	rest := bytes.TrimLeft(piece, " \t\r\n")
	if len(rest) == 0 || rest[0] == '{' {
		return true
	}
	if rest[0] != '[' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	return len(rest) == 0 || rest[0] == '{'
}
