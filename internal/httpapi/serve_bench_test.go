package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// BenchmarkServe runs the whole stack in this process (HTTP over loopback,
// the handler, the store, the throw-away PostgreSQL of the tests) for a CPU
// profile of the Go side:
//
//	go test -run '^$' -bench Serve -cpuprofile cpu.out ./internal/httpapi
//	go tool pprof -tagfocus side=server -top cpu.out
//
// The server's goroutines carry the profiler label side=server, so the
// client's share can be left out. make bench measures the real binary on a
// durable PostgreSQL; these numbers are for profiles, not for the targets.
func BenchmarkServe(b *testing.B) {
	srv, token := startBenchServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)

	body := []byte(`{"topic":"bench-create","note":"a demo request filed by the load generator"}`)
	post := func(path, key, attempt string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if attempt != "" {
			req.Header.Set("X-Client-Attempt", attempt)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, nil
	}
	var seq atomic.Int64
	var keys []string
	for range 256 {
		k := fmt.Sprintf("replay-%d", seq.Add(1))
		if resp, err := post("/v1/demo-requests", k, ""); err != nil || resp.StatusCode != http.StatusCreated {
			b.Fatalf("seed create: %v %v", resp, err)
		}
		keys = append(keys, k)
	}

	for _, bc := range []struct {
		name     string
		path     string
		key      func() string
		attempt  string // X-Client-Attempt: a retry (2) reads its key first
		replayed string
	}{
		{"create", "/v1/demo-requests", func() string { return fmt.Sprintf("create-%d", seq.Add(1)) }, "", ""},
		{"replay", "/v1/demo-requests", func() string { return keys[seq.Add(1)%int64(len(keys))] }, "", "true"},
		{"replay-attempt-2", "/v1/demo-requests", func() string { return keys[seq.Add(1)%int64(len(keys))] }, "2", "true"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4) // 4 × GOMAXPROCS clients
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := post(bc.path, bc.key(), bc.attempt)
					if err != nil {
						b.Error(err)
						return
					}
					if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != bc.replayed {
						b.Errorf("status %d, replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
						return
					}
				}
			})
		})
	}
}

// startBenchServer serves the API as serve.go wires it, on a fresh database.
// It returns the server and the bearer token of actor "bench".
func startBenchServer(tb testing.TB) (*httptest.Server, string) {
	const token = "bench-token"
	tokens, err := auth.Parse("bench:" + auth.Hash(token))
	if err != nil {
		tb.Fatal(err)
	}
	db, err := postgres.Open(context.Background(), pgtest.NewURL(tb), postgres.KeyStatements) // as the service opens it
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	store := postgres.New(db)
	deps := httpapi.Deps{
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Keys:   store,
		Demo:   &demo.Service{Store: store, RefusedTopics: map[string]bool{"blocked": true}},
		Writes: store,
		Tokens: tokens,
		Ready:  store.Ping,
		TTL:    24 * time.Hour,
		Lease:  30 * time.Second,
	}
	h, err := httpapi.NewServer(deps)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	// Serve's goroutines, and the connections' it starts, inherit the label.
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) { srv.Start() })
	tb.Cleanup(srv.Close)
	return srv, token
}
