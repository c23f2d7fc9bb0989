package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// BenchmarkStoreCreate runs a create's store calls, one phase and two
// phases, from one goroutine against the tests' PostgreSQL, for the Go
// side's allocations per create (-benchmem) and its CPU profile:
//
//	go test -run '^$' -bench StoreCreate -benchmem -cpuprofile cpu.out ./internal/postgres
//
// ns/op is mostly the round trips' wait; cpu-µs/op is this process's CPU
// (user and system) per create, the Go side and its syscalls without
// PostgreSQL's. make bench measures CPU per request.
func BenchmarkStoreCreate(b *testing.B) {
	db, err := postgres.Open(context.Background(), pgtest.NewURL(b), postgres.KeyStatements)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	s := postgres.New(db)
	ctx := context.Background()
	var seq atomic.Int64
	scope := func() idempotency.Scope {
		return idempotency.Scope{Actor: "bench", Operation: "demo-requests.create", Key: fmt.Sprintf("k-%d", seq.Add(1))}
	}
	b.Run("one-phase", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			cr, err := s.CreateResultAndFinishAtomically(ctx, scope(), "fp", uuid.NewString(), ttl, created(s, newRequest("bench", "t")))
			if err != nil || !cr.Claimed {
				b.Fatalf("create: %+v, %v", cr, err)
			}
		}
	})
	b.Run("two-phase", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			c := idempotency.Claim{Scope: scope(), Token: uuid.NewString()}
			cr, err := s.Claim(ctx, c.Scope, "fp", c.Token, lease, ttl)
			if err != nil || !cr.Claimed {
				b.Fatalf("claim: %+v, %v", cr, err)
			}
			if err := s.FinishClaimAtomically(ctx, c, created(s, newRequest("bench", "t"))); err != nil {
				b.Fatalf("finish: %v", err)
			}
		}
	})
}

// reportCPU starts measuring the process's CPU time; the function it
// returns reports it per iteration as cpu-µs/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op") }
}
