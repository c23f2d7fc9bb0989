package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/workshop"
)

// lookupCounter counts the reads of the key record a waiting request makes.
type lookupCounter struct {
	idempotency.Store
	n atomic.Int64
}

func (c *lookupCounter) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	c.n.Add(1)
	return c.Store.Lookup(ctx, sc)
}

// BenchmarkPreferWait measures the two ways a request with Prefer: wait
// learns the owner's answer: woken by the owner's finish in the same process,
// or by polling the store when the owner runs on another replica (a second
// server on the same database). The owner holds its claim 300 ms
// (Workshop-Delay); the waiter is sent 100 ms in. It reports how long after
// the owner's answer the waiter got its own, and the store reads the wait
// cost:
//
//	go test -run '^$' -bench PreferWait -benchtime 20x ./internal/httpapi
func BenchmarkPreferWait(b *testing.B) {
	dbURL := pgtest.NewURL(b)
	var servers [2]*httptest.Server
	var counters [2]*lookupCounter
	tokens, _ := auth.Parse("bench:" + auth.Hash("bench-token"))
	for i := range servers {
		db, err := postgres.Open(context.Background(), dbURL, postgres.KeyStatements)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		store := postgres.New(db)
		counters[i] = &lookupCounter{Store: store}
		h, err := httpapi.NewServer(httpapi.Deps{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Keys: counters[i],
			Demo: &demo.Service{Store: store}, Writes: store, Tokens: tokens, Ready: store.Ping,
			TTL: time.Hour, Lease: 30 * time.Second, Workshop: true, Decorate: workshop.Knobs(15 * time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		servers[i] = httptest.NewServer(h)
		b.Cleanup(servers[i].Close)
	}
	post := func(srv *httptest.Server, key string, header ...string) time.Time {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/demo-requests", bytes.NewReader([]byte(`{"topic":"wait"}`)))
		req.Header.Set("Authorization", "Bearer bench-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Now()
	}
	for _, tc := range []struct {
		name   string
		waiter int // the server the waiter is sent to; the owner's is 0
	}{{"woken-same-process", 0}, {"polled-other-replica", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			var after time.Duration
			reads := counters[tc.waiter].n.Load()
			for i := range b.N {
				key := tc.name + "-" + strconv.Itoa(i)
				owner := make(chan time.Time, 1)
				go func() { owner <- post(servers[0], key, "Workshop-Delay", "300ms") }()
				time.Sleep(100 * time.Millisecond)
				waited := post(servers[tc.waiter], key, "Prefer", "wait=5")
				after += waited.Sub(<-owner)
			}
			b.ReportMetric(float64(after.Milliseconds())/float64(b.N), "ms-after-owner")
			b.ReportMetric(float64(counters[tc.waiter].n.Load()-reads)/float64(b.N), "reads/wait")
			b.ReportMetric(0, "ns/op")
		})
	}
}
