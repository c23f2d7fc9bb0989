package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/pgtest"
)

// syncBuffer is a strings.Builder that serve may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWorkshopBeyondLoopbackWarns: serve logs a warning when the workshop
// knobs are on and it listens on an address other machines can reach; not
// on loopback, and not with the knobs off.
func TestWorkshopBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, tt := range []struct {
		addr, workshop string
		warn           bool
	}{
		{"0.0.0.0:0", "true", true},
		{"127.0.0.1:0", "true", false},
		{"0.0.0.0:0", "false", false},
	} {
		env := map[string]string{"DATABASE_URL": url, "API_TOKENS": "alice:" + auth.Hash("tok"),
			"LISTEN_ADDR": tt.addr, "WORKSHOP": tt.workshop}
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr syncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr) }()
		for end := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "listening") && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve on %s: %v\n%s", tt.addr, err, stderr.String())
		}
		if warned := strings.Contains(stderr.String(), "workshop knobs are on"); warned != tt.warn {
			t.Errorf("serve on %s with WORKSHOP=%s: warned %v, want %v; its log:\n%s", tt.addr, tt.workshop, warned, tt.warn, stderr.String())
		}
	}
}
