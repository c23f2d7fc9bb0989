package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// profilerEnv is serve's environment on a fresh database with PPROF_ADDR=addr.
func profilerEnv(t *testing.T, addr string) map[string]string {
	return map[string]string{"DATABASE_URL": pgtest.NewURL(t), "API_TOKENS": "alice:" + auth.Hash("t"),
		"LISTEN_ADDR": "127.0.0.1:0", "PPROF_ADDR": addr}
}

// TestServeRefusesAProfilerBeyondThisMachine: serve with PPROF_ADDR on
// every interface stops before it listens.
func TestServeRefusesAProfilerBeyondThisMachine(t *testing.T) {
	t.Parallel()
	env := profilerEnv(t, "0.0.0.0:0")
	var stdout testenv.Buffer
	err := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "this machine only") {
		t.Fatalf("serve with PPROF_ADDR=0.0.0.0:0: %v", err)
	}
	if strings.Contains(stdout.String(), "listening") {
		t.Errorf("serve with PPROF_ADDR=0.0.0.0:0 listened before it refused:\n%s", stdout.String())
	}
}

// TestServeProfiles: serve with PPROF_ADDR on loopback prints where its
// profiler is on the line after its address, where demo-bench reads it,
// and serves the profiles there.
func TestServeProfiles(t *testing.T) {
	t.Parallel()
	env := profilerEnv(t, "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, w, io.Discard)
		w.Close()
	}()
	lines := bufio.NewReader(out)
	first, _ := lines.ReadString('\n')
	second, _ := lines.ReadString('\n')
	go io.Copy(io.Discard, lines)
	_, url, ok := strings.Cut(strings.TrimSpace(second), "demo-api pprof on ")
	if !strings.Contains(first, "listening on") || !ok {
		cancel()
		t.Fatalf("serve with PPROF_ADDR printed %q then %q; want its address, then its profiler's (%v)", first, second, <-done)
	}
	if body := testenv.Get(t, url+"allocs?debug=1"); !strings.Contains(body, "heap profile") {
		t.Errorf("%sallocs?debug=1: %.80s", url, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}
