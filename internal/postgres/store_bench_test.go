package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// BenchmarkStoreCreate runs a create's store calls, one phase and two
// phases, from one goroutine against the tests' PostgreSQL, for the Go
// side's allocations per create (-benchmem) and its CPU profile:
//
//	go test -run '^$' -bench StoreCreate -benchmem -cpuprofile cpu.out ./internal/postgres
//
// ns/op is mostly the round trips' wait; cpu-µs/op is this process's CPU
// (user and system) per create, the Go side and its syscalls without
// PostgreSQL's; wal-B/op the WAL PostgreSQL wrote per create
// (pg_current_wal_lsn before and after; the tests' cluster runs with
// full_page_writes off, so without the page images a checkpoint adds).
// make bench measures CPU per request.
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
		defer reportWAL(b, db)()
		for b.Loop() {
			cr, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: scope(), Token: uuid.NewString()}, "fp", ttl, created(s, newRequest("bench", "t")))
			if err != nil || !cr.Wrote {
				b.Fatalf("create: %+v, %v", cr, err)
			}
		}
	})
	b.Run("two-phase", func(b *testing.B) {
		defer reportCPU(b)()
		defer reportWAL(b, db)()
		for b.Loop() {
			c := idempotency.Claim{Scope: scope(), Token: uuid.NewString()}
			cr, err := s.Claim(ctx, idempotency.Claim{Scope: c.Scope, Token: c.Token}, "fp", lease, ttl)
			if err != nil || !cr.Wrote {
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
	start := testenv.CPUTime()
	return func() { b.ReportMetric(float64((testenv.CPUTime()-start).Microseconds())/float64(b.N), "cpu-µs/op") }
}

// reportWAL starts measuring the WAL the cluster writes; the function it
// returns reports it per iteration as wal-B/op.
func reportWAL(b *testing.B, db *sqlx.DB) func() {
	lsn := func() string {
		var l string
		if err := db.Get(&l, `SELECT pg_current_wal_insert_lsn()::text`); err != nil {
			b.Fatal(err)
		}
		return l
	}
	start := lsn()
	return func() {
		var bytes float64
		if err := db.Get(&bytes, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)`, lsn(), start); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(bytes/float64(b.N), "wal-B/op")
		if testing.Verbose() {
			b.Logf("WAL from %s to %s (pg_waldump --stats=record -s %[1]s -e %[2]s)", start, lsn())
		}
	}
}
