package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

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
		var stdout, stderr testenv.Buffer
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

// TestDispatchServesMetrics: demo-api dispatch, a process of its own,
// serves /metrics on the address METRICS_ADDR names, with the outbox's
// metrics.
func TestDispatchServesMetrics(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewURL(t), "PROVIDER_URL": "http://127.0.0.1:1",
		"METRICS_ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dispatch"}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	defer func() { cancel(); <-done }()
	var url string
	for end := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if line, ok := strings.CutPrefix(stdout.String(), "dispatcher metrics on "); ok {
			url = strings.TrimSpace(line)
		}
	}
	if url == "" {
		t.Fatalf("dispatch printed no metrics address:\n%s", stderr.String())
	}
	// A scrape waits a second for the database; a read that takes longer
	// serves the next scrape, so a busy machine may need a few.
	var body string
	if !testenv.Eventually(10*time.Second, func() bool {
		body = testenv.Get(t, url)
		return strings.Contains(body, "\ndemo_api_outbox_backlog 0\n")
	}) {
		t.Fatalf("the dispatcher's /metrics has no outbox backlog:\n%s", body)
	}
}
