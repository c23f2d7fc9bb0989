package expedite_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCancelAndOrderNeverBothApply: the rule between a cancel and an
// expedite holds in the database itself, whatever the reads decided. The
// template's cancel statement (decided on a read that saw no expedite)
// and the expedite's order are sent at the same moment, round after round,
// on the cancel's one-phase and two-phase statements: exactly one of them
// changes the request each round, never both.
func TestCancelAndOrderNeverBothApply(t *testing.T) {
	order, err := os.ReadFile("sql/insert_expedite.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, path := range []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase} {
		t.Run(string(path), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			keys := postgres.New(db)
			won := map[string]int{}
			for i := range 25 {
				now := time.Now().UTC().Truncate(time.Microsecond)
				r := demo.Request{ID: uuid.NewString(), Actor: "alice", State: demo.StateAccepted, Topic: "t", CreatedAt: now}
				created := idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte("{}")}, Effect: keys.CreateDemoRequest(r)}
				sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-" + r.ID}
				if cr, err := keys.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", time.Hour, created); err != nil || !cr.Wrote {
					t.Fatalf("create: %+v, %v", cr, err)
				}
				c := r
				c.State, c.CancelledAt = demo.StateCancelled, &now
				cancelled := idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte("{}")}, Effect: keys.CancelDemoRequest(c)}
				cs := idempotency.Scope{Actor: "alice", Operation: "demo-requests.cancel", Key: "c-" + r.ID}
				claim := idempotency.Claim{Scope: cs, Token: uuid.NewString()}
				if path == idempotency.TwoPhase {
					if cr, err := keys.Claim(ctx, claim, r.ID, time.Minute, time.Hour); err != nil || !cr.Wrote {
						t.Fatalf("claim of the cancel: %+v, %v", cr, err)
					}
				}
				start := make(chan struct{})
				var cancelErr, orderErr error
				var ordered int64
				var wg sync.WaitGroup
				wg.Go(func() {
					<-start
					if path == idempotency.TwoPhase {
						cancelErr = keys.FinishClaimAtomically(ctx, claim, cancelled)
					} else {
						_, cancelErr = keys.CompleteAtomically(ctx, idempotency.Claim{Scope: cs, Token: uuid.NewString()}, r.ID, time.Hour, cancelled)
					}
				})
				wg.Go(func() {
					<-start
					res, err := db.ExecContext(ctx, string(order), r.ID, "alice", "x-"+r.ID, expedite.ExpediteAmount, now)
					if orderErr = err; err == nil {
						ordered, orderErr = res.RowsAffected()
					}
				})
				close(start)
				wg.Wait()
				switch {
				case orderErr != nil:
					t.Fatalf("round %d: the order: %v", i, orderErr)
				case cancelErr == nil && ordered == 0:
					won["cancel"]++
				case errors.Is(cancelErr, idempotency.ErrEffectNotApplied) && ordered == 1:
					won["expedite"]++
				default:
					t.Fatalf("round %d: the cancel: %v, orders recorded: %d; want exactly one to apply", i, cancelErr, ordered)
				}
			}
			if n := testenv.Count(t, db, `SELECT count(*) FROM demo_requests d JOIN expedites e ON e.request_id = d.id
				WHERE d.state = 'cancelled'`); n != 0 {
				t.Fatalf("%d cancelled requests with an expedite", n)
			}
			t.Logf("25 rounds: %v", won)
		})
	}
}

// The store keeps the expedites and, in the same database, the runs.
var _ expedite.ExpediteWrites = (*expedite.Store)(nil)
