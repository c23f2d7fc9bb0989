package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestScansReachEveryRow: the dispatcher's take, its marks and the
// sweeper reach every actor's rows, on one PostgreSQL and on Citus, where
// forty actors' rows spread over every shard. One take of a batch larger
// than all of them takes each once, their marks record every one, and a
// second take finds none; a sweep in batches of three, mark after mark,
// deletes every expired key, each once. postgres.NewFor picks the store:
// the one-PostgreSQL store's take fails on Citus.
func TestScansReachEveryRow(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s, err := postgres.NewFor(ctx, db) // the store on Citus where db is a coordinator's
	if err != nil {
		t.Fatal(err)
	}
	if pgtest.Citus() {
		var shards, holding int
		if err := db.Get(&shards, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'outbox'::regclass`); err != nil {
			t.Fatal(err)
		}
		if err := db.Get(&holding, `SELECT count(DISTINCT get_shard_id_for_distribution_column('outbox', 'actor-' || g))
			FROM generate_series(0, 39) g`); err != nil || holding != shards {
			t.Fatalf("the actors' rows are on %d of the %d shards (%v): want all", holding, shards, err)
		}
	}
	takeSettleAndSweep(t, s, db, 40)
}

// takeSettleAndSweep creates a request of each of n actors, then takes,
// marks and sweeps them through s: each once.
func takeSettleAndSweep(t *testing.T, s *postgres.Store, db *sqlx.DB, n int) {
	t.Helper()
	ctx := context.Background()
	clk := testenv.NewClock()
	s.Clock = clk.Now
	for i := range n {
		r := demo.Request{ID: uuid.NewString(), Actor: fmt.Sprintf("actor-%d", i), State: demo.StateAccepted, Topic: "t", CreatedAt: clk.Now()}
		d := idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte("{}"), ResultID: r.ID}, Effect: s.CreateDemoRequest(r)}
		sc := idempotency.Scope{Actor: r.Actor, Operation: "demo-requests.create", Key: r.ID}
		if _, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", time.Hour, d); err != nil {
			t.Fatal(err)
		}
	}

	token := uuid.NewString()
	due, err := s.TakeDue(ctx, token, 100, time.Minute, nil)
	taken := map[string]bool{}
	for _, d := range due {
		taken[d.RequestID] = true
	}
	if err != nil || len(due) != n || len(taken) != n {
		t.Fatalf("one take of 100: %d rows, %d requests, %v; want each of the %d once", len(due), len(taken), err, n)
	}
	marks := make([]delivery.Mark, len(due))
	for i, d := range due {
		marks[i] = delivery.Mark{RequestID: d.RequestID, Actor: d.Actor, Kind: d.Kind, Seq: d.Seq, Token: token,
			State: delivery.Submitted, Reference: "ref-" + d.RequestID}
	}
	if settled, err := s.Settle(ctx, marks); err != nil || settled != n {
		t.Fatalf("the marks recorded %d rows, %v; want %d", settled, err, n)
	}
	if submitted := testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE state = 'submitted' AND provider_reference = 'ref-' || request_id`); submitted != n {
		t.Fatalf("%d rows submitted with their reference, want %d", submitted, n)
	}
	if due, err := s.TakeDue(ctx, uuid.NewString(), 100, time.Minute, nil); err != nil || len(due) != 0 {
		t.Fatalf("a take after the marks: %d rows, %v; want none", len(due), err)
	}

	clk.Advance(2 * time.Hour)
	var deleted int64
	batches := 0
	for mark := (postgres.SweepMark{}); ; batches++ {
		d, next, err := s.PurgeExpired(ctx, 3, mark)
		if err != nil {
			t.Fatal(err)
		}
		deleted += d
		if next == nil {
			break
		}
		mark = *next
	}
	if left := testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys`); deleted != int64(n) || left != 0 {
		t.Fatalf("the sweep deleted %d keys in %d batches, %d left; want all %d", deleted, batches+1, left, n)
	}
	t.Logf("one take of %d, one settle, a sweep in %d batches of 3", n, batches+1)
}
