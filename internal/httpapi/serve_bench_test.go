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

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// BenchmarkServe runs the whole stack in this process (HTTP over loopback,
// the handler, the store, the metrics, the throw-away PostgreSQL of the
// tests) for a CPU profile of the Go side, and for its allocations per
// request:
//
//	go test -run '^$' -bench Serve -benchmem -cpuprofile cpu.out ./internal/httpapi
//	go tool pprof -tagfocus side=server -top cpu.out
//
// The server's goroutines carry the profiler label side=server, so the
// client's share can be left out. cpu-µs/op is this
// process's CPU per request (clients and server, without PostgreSQL). make bench measures
// the real binary on a durable PostgreSQL; these numbers are for profiles
// and allocation counts, not for the targets.
func BenchmarkServe(b *testing.B) {
	srv, token := startBenchServer(b, "")
	srv2p, _ := startBenchServer(b, idempotency.TwoPhase)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)

	body := []byte(`{"topic":"bench-create","note":"a demo request filed by the load generator"}`)
	do := func(req *http.Request) (*http.Response, error) { // the answer read whole, its body closed
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, nil
	}
	post := func(url, key, attempt string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if attempt != "" {
			req.Header.Set("X-Client-Attempt", attempt)
		}
		return do(req)
	}
	get := func(url, _, _ string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return do(req)
	}
	var seq atomic.Int64
	var keys, ids []string
	for range 256 {
		k := fmt.Sprintf("replay-%d", seq.Add(1))
		resp, err := post(srv.URL+"/v1/demo-requests", k, "")
		if err != nil || resp.StatusCode != http.StatusCreated {
			b.Fatalf("seed create: %v %v", resp, err)
		}
		keys, ids = append(keys, k), append(ids, resp.Header.Get("Location"))
	}

	for _, bc := range []struct {
		name     string
		url      string
		key      func() string
		attempt  string // X-Client-Attempt: a retry (2) reads its key first
		replayed string
		send     func(url, key, attempt string) (*http.Response, error) // post when nil
		status   int                                                    // 201 when 0
	}{
		{"create", srv.URL + "/v1/demo-requests", func() string { return fmt.Sprintf("create-%d", seq.Add(1)) }, "", "", nil, 0},
		{"create-2p", srv2p.URL + "/v1/demo-requests", func() string { return fmt.Sprintf("create-%d", seq.Add(1)) }, "", "", nil, 0},
		{"replay", srv.URL + "/v1/demo-requests", func() string { return keys[seq.Add(1)%int64(len(keys))] }, "", "true", nil, 0},
		{"replay-attempt-2", srv.URL + "/v1/demo-requests", func() string { return keys[seq.Add(1)%int64(len(keys))] }, "2", "true", nil, 0},
		// read: GET /v1/demo-requests/{id} of the seeds, the read floor of a
		// replay (one indexed read through the same middleware).
		{"read", srv.URL, func() string { return ids[seq.Add(1)%int64(len(ids))] }, "", "", get, http.StatusOK},
	} {
		send, status := bc.send, bc.status
		if send == nil {
			send, status = post, http.StatusCreated
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4) // 4 × GOMAXPROCS clients
			b.ReportAllocs()
			cpu := testenv.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := bc.key()
					url := bc.url
					if bc.send != nil {
						url, key = bc.url+key, "" // the key is the path
					}
					resp, err := send(url, key, bc.attempt)
					if err != nil {
						b.Error(err)
						return
					}
					if resp.StatusCode != status || resp.Header.Get("Idempotent-Replayed") != bc.replayed {
						b.Errorf("status %d, replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
						return
					}
				}
			})
			// This process's CPU (the clients' and the server's Go side,
			// not PostgreSQL's) per request: the clients' share is the same
			// in every case, so differences are the server's.
			b.ReportMetric(float64(testenv.CPUTime()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

const benchToken = "bench-token"

// benchTokens are the bearer token of actor "bench".
func benchTokens(tb testing.TB) auth.Tokens {
	tokens, err := auth.Parse("bench:" + auth.Hash(benchToken))
	if err != nil {
		tb.Fatal(err)
	}
	return tokens
}

// benchDB opens a fresh database as the service opens it.
func benchDB(tb testing.TB) *sqlx.DB {
	db, err := postgres.Open(context.Background(), pgtest.NewURL(tb), postgres.KeyStatements)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// startBenchServer serves the API as serve.go wires it (its JSON request
// log, to nowhere here, its metrics, and its bound on new keys, set far
// above the bench's rate), on a fresh database, on path
// ("": each operation's own). It returns the server and the bearer token of
// actor "bench".
func startBenchServer(tb testing.TB, path idempotency.Path) (*httptest.Server, string) {
	store := postgres.New(benchDB(tb))
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	deps := httpapi.Deps{
		Logger:  logger,
		Keys:    store.Watched(), // as serve composes it
		Demo:    &demo.Service{Store: store, RefusedTopics: map[string]bool{"blocked": true}},
		Writes:  store,
		Tokens:  benchTokens(tb),
		Ready:   store.Ping,
		TTL:     24 * time.Hour,
		Lease:   30 * time.Second,
		Metrics: metrics.New(store, logger),
		Path:    path,

		NewKeysPerSecond: 1e9, NewKeysBurst: 1e9,
	}
	h, err := httpapi.NewServer(deps)
	if err != nil {
		tb.Fatal(err)
	}
	return startLabelled(tb, h), benchToken
}

// startLabelled serves h with the profiler label side=server: Serve's
// goroutines, and the connections' it starts, inherit it.
func startLabelled(tb testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) { srv.Start() })
	tb.Cleanup(srv.Close)
	return srv
}
