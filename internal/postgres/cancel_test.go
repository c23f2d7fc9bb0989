package postgres_test

import (
	"context"
	"errors" // demo-only
	"sync"   // demo-only
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// cancelled is the cancel of r as the work decides it, with its answer.
func cancelled(s *postgres.Store, r demo.Request) idempotency.Decided {
	at := time.Now().UTC().Truncate(time.Microsecond)
	r.State, r.CancelledAt = demo.StateCancelled, &at
	return idempotency.Decided{Response: idempotency.Response{Status: 200, Body: []byte(`{"state":"cancelled"}`), ResultID: r.ID},
		Effect: cancelEffect(s, r)}
}

// cancelEffect is the cancel's write of r, as the cancel operation makes
// it: the effect sql/effect/cancel_demo_request.sql, with its parameters.
func cancelEffect(s *postgres.Store, r demo.Request) idempotency.Effect {
	write, err := s.Effect("cancel_demo_request.sql")
	if err != nil {
		panic(err)
	}
	return write(r.State, r.CancelledAt, r.ID)
}

func cancelScope(key string) idempotency.Scope {
	return idempotency.Scope{Actor: "alice", Operation: "demo-requests.cancel", Key: key}
}

// TestTheCancelStopsTheDelivery: the cancel's statement, in both its one-
// phase and its two-phase form, withdraws a delivery never tried, and queues
// a cancel at the desk for one that was.
func TestTheCancelStopsTheDelivery(t *testing.T) {
	ctx := context.Background()
	createScope := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}
	cancelOnePhase := func(t *testing.T, s *postgres.Store, r demo.Request) {
		onePhase(t, s, cancelScope("c-1"), r.ID, cancelled(s, r))
	}
	cancelTwoPhase := func(t *testing.T, s *postgres.Store, r demo.Request) {
		cr, c := claim(t, s, cancelScope("c-1"), r.ID)
		if !cr.Claimed {
			t.Fatalf("claim of the cancel = %+v", cr)
		}
		if err := s.FinishClaimAtomically(ctx, c, cancelled(s, r)); err != nil {
			t.Fatal(err)
		}
	}
	for name, cancel := range map[string]func(*testing.T, *postgres.Store, demo.Request){"one phase": cancelOnePhase, "two phase": cancelTwoPhase} {
		t.Run(name+": never tried, withdrawn", func(t *testing.T) {
			s, db, clk := newStore(t)
			r := newRequest("alice", "t")
			onePhase(t, s, createScope, "fp", created(s, r))
			clk.Advance(time.Minute) // the delivery is due
			cancel(t, s, r)
			if n := count(t, db, `SELECT count(*) FROM outbox WHERE request_id = $1 AND kind = 'submit' AND state = 'withdrawn'
				AND next_attempt_at IS NULL`, r.ID); n != 1 {
				t.Fatal("the cancel did not withdraw the delivery never tried")
			}
			if n := count(t, db, `SELECT count(*) FROM outbox WHERE kind = 'cancel'`); n != 0 {
				t.Fatalf("%d cancels queued for the desk, want 0: it never heard of the request", n)
			}
			if due, err := s.TakeDue(ctx, uuid.NewString(), 10, lease, nil); err != nil || len(due) != 0 {
				t.Fatalf("take after the withdrawal = %+v, %v; want nothing due", due, err)
			}
		})
		t.Run(name+": tried, a cancel for the desk", func(t *testing.T) {
			s, db, clk := newStore(t)
			r := newRequest("alice", "t")
			onePhase(t, s, createScope, "fp", created(s, r))
			clk.Advance(time.Minute) // the delivery is due
			holder := uuid.NewString()
			if due, err := s.TakeDue(ctx, holder, 10, lease, nil); err != nil || len(due) != 1 {
				t.Fatalf("take = %+v, %v", due, err)
			}
			cancel(t, s, r)
			if n := count(t, db, `SELECT count(*) FROM outbox WHERE request_id = $1 AND kind = 'submit' AND state = 'pending'
				AND lease_token = $2`, r.ID, holder); n != 1 {
				t.Fatal("the cancel changed a delivery a dispatcher holds")
			}
			due, err := s.TakeDue(ctx, uuid.NewString(), 10, lease, nil)
			if err != nil || len(due) != 1 || due[0].Kind != "cancel" || due[0].RequestID != r.ID || due[0].Attempt != 1 {
				t.Fatalf("take after the cancel = %+v, %v; want the cancel, due now, as a first attempt", due, err)
			}
		})
	}
}

// TestACancelWaitsForTheDispatchersTake: the race at the row. A dispatcher's
// take (outbox_take_due.sql) holds the row locked, not yet committed, when
// the cancel runs. The cancel waits for the lock, then sees the attempt the
// take counted: the dispatcher wins, the delivery stays its, and the cancel
// goes to the desk.
func TestACancelWaitsForTheDispatchersTake(t *testing.T) {
	ctx := context.Background()
	s, db, clk := newStore(t)
	r := newRequest("alice", "t")
	onePhase(t, s, idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}, "fp", created(s, r))

	clk.Advance(time.Minute) // the delivery is due

	tx := db.MustBeginTx(ctx, nil)
	defer tx.Rollback()
	holder := uuid.NewString()
	var taken []delivery.Due
	if err := tx.SelectContext(ctx, &taken, readSQL(t, "outbox_take_due.sql"), clk.Now(), pq.Array([]string{}), 10, holder, lease.Microseconds()); err != nil || len(taken) != 1 {
		t.Fatalf("take in the open transaction = %v, %v", taken, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.CreateResultAndFinishAtomically(ctx, cancelScope("c-1"), r.ID, uuid.NewString(), ttl, cancelled(s, r))
		done <- err
	}()
	waiting := testkit.Eventually(5*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
	})
	if !waiting {
		t.Fatal("the cancel did not wait for the take's lock")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM outbox WHERE request_id = $1 AND kind = 'submit' AND state = 'pending'
		AND attempts = 1 AND lease_token = $2`, r.ID, holder); n != 1 {
		t.Fatal("the cancel withdrew a delivery the dispatcher had taken")
	}
	if n := count(t, db, `SELECT count(*) FROM outbox WHERE request_id = $1 AND kind = 'cancel' AND state = 'pending'`, r.ID); n != 1 {
		t.Fatal("no cancel queued for the desk")
	}
	if n := count(t, db, `SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'cancelled'`, r.ID); n != 1 {
		t.Fatal("the request is not cancelled")
	}
}

// demo-only{ the rule between a cancel and the expedite

// TestCancelAndExpediteOrderNeverBothApply: the rule between a cancel and an
// expedite holds in the statements themselves, whatever their reads
// decided. A cancel (decided on a read that saw no expedite) and the
// expedite's order are sent at the same moment, round after round, on the
// cancel's one-phase and two-phase statements: exactly one of them changes
// the request each round, never both.
func TestCancelAndExpediteOrderNeverBothApply(t *testing.T) {
	ctx := context.Background()
	for _, path := range []string{"one phase", "two phase"} {
		t.Run(path, func(t *testing.T) {
			s, db, _ := newStore(t)
			const rounds = 25
			won := map[string]int{}
			for i := range rounds {
				r := newRequest("alice", "t")
				onePhase(t, s, idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-" + r.ID}, "fp", created(s, r))
				sc := cancelScope("c-" + r.ID)
				var c idempotency.Claim
				if path == "two phase" {
					var cr idempotency.ClaimResult
					if cr, c = claim(t, s, sc, r.ID); !cr.Claimed {
						t.Fatalf("claim of the cancel = %+v", cr)
					}
				}
				start := make(chan struct{})
				var cancelErr, orderErr error
				var ordered int64
				var wg sync.WaitGroup
				wg.Go(func() {
					<-start
					if path == "two phase" {
						cancelErr = s.FinishClaimAtomically(ctx, c, cancelled(s, r))
					} else {
						_, cancelErr = s.CreateResultAndFinishAtomically(ctx, sc, r.ID, uuid.NewString(), time.Hour, cancelled(s, r))
					}
				})
				wg.Go(func() {
					<-start
					res, err := db.ExecContext(ctx, readSQL(t, "insert_expedite.sql"), r.ID, "alice", "x-"+r.ID, demo.ExpediteAmount, time.Now())
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
			if n := count(t, db, `SELECT count(*) FROM demo_requests d JOIN expedites e ON e.request_id = d.id
				WHERE d.state = 'cancelled'`); n != 0 {
				t.Fatalf("%d cancelled requests with an expedite", n)
			}
			t.Logf("%d rounds: %v", rounds, won)
		})
	}
}

// }demo-only
