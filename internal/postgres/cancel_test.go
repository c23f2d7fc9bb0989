package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// cancelled is the cancel of r as the work decides it, with its answer.
func cancelled(s *postgres.Store, r demo.Request) idempotency.Answer {
	at := time.Now().UTC().Truncate(time.Microsecond)
	r.State, r.CancelledAt = demo.StateCancelled, &at
	return idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte(`{"state":"cancelled"}`), ResultID: r.ID},
		Effect: s.CancelDemoRequest(r)}
}

func cancelScope(key string) idempotency.Scope {
	return idempotency.Scope{Actor: "alice", Operation: "demo-requests.cancel", Key: key}
}

// TestTheCancelStopsTheDelivery: the cancel's statement, in both its one-
// phase and its two-phase form, withdraws a delivery never tried, and queues
// a cancel at the desk for one that was, taken once the submission's attempt
// has ended.
func TestTheCancelStopsTheDelivery(t *testing.T) {
	ctx := context.Background()
	createScope := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "k-1"}
	cancelOnePhase := func(t *testing.T, s *postgres.Store, r demo.Request) {
		onePhase(t, s, cancelScope("c-1"), r.ID, cancelled(s, r))
	}
	cancelTwoPhase := func(t *testing.T, s *postgres.Store, r demo.Request) {
		cr, c := claim(t, s, cancelScope("c-1"), r.ID)
		if !cr.Wrote {
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
			// The cancel is queued, due now, behind the submission's attempt.
			if due, err := s.TakeDue(ctx, uuid.NewString(), 10, lease, nil); err != nil || len(due) != 0 {
				t.Fatalf("take while the submission is held = %+v, %v; want nothing: the cancel waits for it", due, err)
			}
			if n, err := s.Settle(ctx, []delivery.Mark{{RequestID: r.ID, Actor: r.Actor, Kind: delivery.KindSubmit, Seq: 1, Token: holder,
				State: delivery.Submitted, Reference: "ref-1"}}); err != nil || n != 1 {
				t.Fatalf("settle the submission = %d, %v", n, err)
			}
			due, err := s.TakeDue(ctx, uuid.NewString(), 10, lease, nil)
			if err != nil || len(due) != 1 || due[0].Kind != "cancel" || due[0].RequestID != r.ID || due[0].Attempt != 1 {
				t.Fatalf("take after the submission's attempt = %+v, %v; want the cancel, due now, as a first attempt", due, err)
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
		_, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: cancelScope("c-1"), Token: uuid.NewString()}, r.ID, ttl, cancelled(s, r))
		done <- err
	}()
	waiting := testenv.Eventually(5*time.Second, func() bool {
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
