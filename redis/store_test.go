package reboundredis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var echo = redis.NewScript(`return ARGV[1]`)

func TestStoreGoesAwayAndComesBack(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.Timeout, cfg.RetryEvery = 50*time.Millisecond, 100*time.Millisecond
	var mu sync.Mutex
	var changes []bool
	cfg.OnChange = func(up bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, up)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := s.run(ctx, echo, nil, "x"); err != nil || res != "x" {
		t.Fatalf("%v %v", res, err)
	}
	srv.Stop()
	for range 3 {
		start := time.Now()
		if _, err := s.run(ctx, echo, nil, "x"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("with Redis gone: %v", err)
		}
		if d := time.Since(start); d > cfg.Timeout+50*time.Millisecond {
			t.Errorf("a decision waited %v for a Redis that is gone", d)
		}
	}
	srv.Start()
	deadline := time.Now().Add(time.Second + cfg.RetryEvery)
	for {
		if _, err := s.run(ctx, echo, nil, "x"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("shared decisions did not resume within a second of Redis's return")
		}
		time.Sleep(10 * time.Millisecond) // real time: a real server came back
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Errorf("OnChange heard %v, want [false true]", changes)
	}
}

func TestNewRefusesUnboundedClients(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(Config{Client: c}); err == nil {
		t.Error("a client that ignores its context's deadline was accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("no client was accepted")
	}
}
