package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/demo-api/demo-api/internal/pgtest"
	"github.com/demo-api/demo-api/internal/postgres"
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
	srv, token := startBenchServer(b, true)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)

	body := []byte(`{"topic":"bench-create","note":"a demo request filed by the load generator"}`)
	post := func(path, key string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
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
		if resp, err := post("/v1/demo-requests", k); err != nil || resp.StatusCode != http.StatusCreated {
			b.Fatalf("seed create: %v %v", resp, err)
		}
		keys = append(keys, k)
	}

	for _, bc := range []struct {
		name     string
		path     string
		key      func() string
		replayed string
	}{
		{"baseline", httpapi.BaselinePath, func() string { return "" }, ""},
		{"create", "/v1/demo-requests", func() string { return fmt.Sprintf("create-%d", seq.Add(1)) }, ""},
		{"replay", "/v1/demo-requests", func() string { return keys[seq.Add(1)%int64(len(keys))] }, "true"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4) // 4 × GOMAXPROCS clients
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := post(bc.path, bc.key())
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

// startBenchServer serves the API as serve.go wires it, on a fresh database,
// with the baseline route if baseline is set. It returns the server and the
// bearer token of actor "bench".
func startBenchServer(tb testing.TB, baseline bool) (*httptest.Server, string) {
	const token = "bench-token"
	tokens, err := auth.Parse("bench:" + auth.Hash(token))
	if err != nil {
		tb.Fatal(err)
	}
	db, err := postgres.Open(context.Background(), pgtest.NewURL(tb)) // as the service opens it
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	store := postgres.New(db)
	deps := httpapi.Deps{
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Keys:   store,
		Demo:   &demo.Service{Store: store, RefusedTopics: map[string]bool{"blocked": true}},
		Tokens: tokens,
		Ready:  store.Ping,
		TTL:    24 * time.Hour,
		Lease:  30 * time.Second,
	}
	if baseline {
		deps.Baseline = store
	}
	srv := httptest.NewUnstartedServer(httpapi.NewServer(deps))
	// Serve's goroutines, and the connections' it starts, inherit the label.
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) { srv.Start() })
	tb.Cleanup(srv.Close)
	return srv, token
}

// TestBaselineRoute checks the benchmark's baseline: absent unless enabled;
// when enabled, authenticated, validated and answered like a create.
func TestBaselineRoute(t *testing.T) {
	body := `{"topic":"bench-create","note":"a demo request filed by the load generator"}`
	post := func(srv *httptest.Server, path, token, key, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}

	off, token := startBenchServer(t, false)
	if resp, _ := post(off, httpapi.BaselinePath, token, "", body); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("baseline route without Deps.Baseline: status %d, want 404", resp.StatusCode)
	}

	on, token := startBenchServer(t, true)
	if resp, _ := post(on, httpapi.BaselinePath, "", "", body); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("baseline without a token: status %d, want 401", resp.StatusCode)
	}
	if resp, m := post(on, httpapi.BaselinePath, token, "", `{"topic":""}`); resp.StatusCode != http.StatusBadRequest || m["code"] != "invalid_field" {
		t.Errorf("baseline with an empty topic: status %d %v, want 400 invalid_field", resp.StatusCode, m)
	}
	base, got := post(on, httpapi.BaselinePath, token, "", body)
	create, want := post(on, "/v1/demo-requests", token, "k-1", body)
	if base.StatusCode != http.StatusCreated || create.StatusCode != http.StatusCreated {
		t.Fatalf("baseline %d, create %d, want 201 both", base.StatusCode, create.StatusCode)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if (base.Header.Get(h) == "") != (create.Header.Get(h) == "") {
			t.Errorf("header %s: baseline %q, create %q", h, base.Header.Get(h), create.Header.Get(h))
		}
	}
	if base.Header.Get("Location") != "/v1/demo-requests/"+fmt.Sprint(got["requestId"]) {
		t.Errorf("baseline Location %q does not name its request %v", base.Header.Get("Location"), got["requestId"])
	}
	for k := range want {
		if _, ok := got[k]; !ok || (k != "requestId" && k != "createdAt" && got[k] != want[k]) {
			t.Errorf("baseline body %v differs from the create's %v at %q", got, want, k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("baseline body %v, create body %v", got, want)
	}
}
