package reboundredis

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests need a Redis server: REBOUND_REDIS_URL names it, else the one
// on 127.0.0.1:6379. They never skip: without it they fail, saying so. The
// fault tests start redis-server themselves, on free ports.

func redisURL() string {
	if u := os.Getenv("REBOUND_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// runID keeps this run's keys apart from any other run's on the same
// Redis.
var runID = strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)

var stores atomic.Int64

// patience bounds a round trip to Redis, and the dial of a connection, in
// the tests: they are of the shared state, and a decision that timed out
// would be made locally. On a machine that other test runs keep busy, a
// local Redis has been seen to take over 100 ms to accept a connection and
// over 200 ms to answer. How long a decision may wait is tested in virtual
// time (stall_test.go), where no load can move it.
const patience = 5 * time.Second

// open is Open with the tests' patience: the same client, whose dial
// waits as long as its decisions.
func open(url string) (Config, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return Config{}, err
	}
	decisionOptions(opt)
	opt.DialTimeout = patience
	// One dial a decision, as with a production Timeout, which ends
	// go-redis's backoff between dials (100 ms) before a second one.
	opt.DialerRetries = 1
	return Config{Client: redis.NewClient(opt), Timeout: patience}, nil
}

// testConfig returns a Config on the test Redis with a prefix unique to
// the run and the test; every key under it is deleted when the test ends.
func testConfig(t testing.TB, url string) Config {
	t.Helper()
	cfg, err := open(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Prefix = fmt.Sprintf("rebound-test:%s:%d:", runID, stores.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		t.Fatalf("these tests need a Redis server at %s (set REBOUND_REDIS_URL to use another): %v", url, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		deleteKeys(ctx, cfg.Client, cfg.Prefix)
		cfg.Client.Close()
	})
	return cfg
}

// testStore is a Store on the test Redis: see testConfig.
func testStore(t testing.TB) *Store {
	t.Helper()
	s, err := New(testConfig(t, redisURL()))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func deleteKeys(ctx context.Context, c redis.UniversalClient, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// A redisServer is a redis-server of the test's own, which it may stop
// and start again on the same port.
type redisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
}

// startRedis starts a redis-server that keeps nothing on disk, on a free
// port, and stops it when the test ends.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{t: t, port: port}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's address as Open takes it.
func (s *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Start starts the server and waits until it answers.
func (s *redisServer) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server (the fault tests need it on the PATH): %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d did not answer: %v", s.port, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we started; no event to wait on
	}
}

// Stop kills the server, as a crash would.
func (s *redisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Child processes: the test binary runs itself with REBOUND_CHILD naming a
// function of children, which starts at the instant REBOUND_START_AT (Unix
// nanoseconds) gives, so that all of them start on one signal.

var children = map[string]func(args []string) error{}

// TestMain runs a child's function instead of the tests when the binary
// is started as a child.
func TestMain(m *testing.M) {
	if role := os.Getenv("REBOUND_CHILD"); role != "" {
		at, _ := strconv.ParseInt(os.Getenv("REBOUND_START_AT"), 10, 64)
		time.Sleep(time.Until(time.Unix(0, at)))
		if err := children[role](strings.Fields(os.Getenv("REBOUND_CHILD_ARGS"))); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChildren runs n children of role with args, all starting a second
// from now, and returns each one's standard output lines. It fails the
// test if a child fails or runs past timeout.
func runChildren(t testing.TB, n int, role string, timeout time.Duration, args ...string) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now().Add(time.Second).UnixNano()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for i := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "REBOUND_CHILD="+role, "REBOUND_START_AT="+strconv.FormatInt(start, 10),
			"REBOUND_CHILD_ARGS="+strings.Join(append(args, "child="+strconv.Itoa(i)), " "))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	lines := make([][]string, n)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d of %s: %v", i, role, err)
		}
		sc := bufio.NewScanner(outs[i])
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines[i] = append(lines[i], sc.Text())
		}
	}
	return lines
}

// childArg returns the value of name=value among a child's args.
func childArg(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// eventually calls done until it reports true, as it must once what the
// test waits for in real time has happened (a real server that came back
// answering, and the store trying it again within RetryEvery; a resumed
// one running what it was sent). The bound only keeps a broken test from
// hanging: when shared decisions resume is tested in virtual time
// (TestStoreWaitsForAStalledRedisNoLongerThanTimeout).
func eventually(t testing.TB, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}
