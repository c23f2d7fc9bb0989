package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// cancel cancels alice's request id under key, as the cancel does: the key
// completed with its answer, the request cancelled and its delivery stopped,
// in one statement. It returns the statement's result: a replay when the
// key was used before.
func (e *env) cancel(t *testing.T, id, key string) idempotency.KeyWrite {
	t.Helper()
	ctx := context.Background()
	r, err := e.store.DemoRequest(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	at := e.clock.Now()
	r.State, r.CancelledAt = demo.StateCancelled, &at
	d := idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte(`{"requestId":"` + id + `","state":"cancelled"}`),
		ResultID: id}, Effect: e.store.CancelDemoRequest(r)}
	sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.cancel", Key: key}
	cr, err := e.store.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, id, time.Hour, d)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func (e *env) deskCancels(t *testing.T, id string) int {
	return e.desk.Cancels(delivery.EventKey(id, delivery.KindCancel, 1), delivery.ProviderKey(id))
}

// TestACancelBeforeDeliveryNeverReachesTheDesk: a request cancelled before
// any attempt is withdrawn by the cancel's own statement; the dispatcher
// finds nothing to do and the desk is never called. The cancel's replay
// answers the same body and changes nothing.
func TestACancelBeforeDeliveryNeverReachesTheDesk(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	first := e.cancel(t, ids[0], "c-1")
	if st := e.status(t, ids[0]); st.State != delivery.Withdrawn || st.NextAttemptAt != nil || st.Cancel != nil {
		t.Fatalf("delivery after the cancel = %+v, want withdrawn, not due, no cancel at the desk", st)
	}
	replay := e.cancel(t, ids[0], "c-1")
	if !first.Wrote || replay.Wrote || replay.Prev == nil || string(replay.Prev.Response.Body) != `{"requestId":"`+ids[0]+`","state":"cancelled"}` ||
		replay.Prev.Response.Status != 200 {
		t.Fatalf("the cancel's replay = %+v, want the stored 200 and its body", replay.Prev)
	}
	d, c := e.dispatcher(8)
	e.drain(t, d)
	if c.calls != 0 || e.desk.Submissions(t) != 0 || e.deskCancels(t, ids[0]) != 0 {
		t.Fatalf("%d calls to the desk (%v), %d submissions, %d cancels: want none", c.calls, c.called,
			e.desk.Submissions(t), e.deskCancels(t, ids[0]))
	}
	if st, err := d.Reconcile(context.Background(), "alice", ids[0]); err != nil || st.State != delivery.Withdrawn || c.calls != 0 {
		t.Fatalf("reconcile of a withdrawn delivery = %+v, %v, %d calls; want it as it is, no call", st, err, c.calls)
	}
}

// TestACancelAfterDeliveryReachesTheDeskOnce: a request the desk holds is
// cancelled there, under demo-request:<id>:cancel, exactly once — also
// when the desk drops the first cancel's answer: the next attempt asks the
// cancel's status and sends nothing.
func TestACancelAfterDeliveryReachesTheDeskOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		faults  testenv.DeskFaults
		lookups map[string]int // the cancel_status answers
	}{
		{"answered", testenv.DeskFaults{}, nil},
		{"answer dropped", testenv.DeskFaults{DropResponses: 1}, map[string]int{"accepted": 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ids := e.accept(t, 1)
			d, c := e.dispatcher(8)
			e.drain(t, d)
			e.cancel(t, ids[0], "c-1")
			st := e.status(t, ids[0])
			if st.State != delivery.Submitted || st.Cancel == nil || st.Cancel.State != delivery.Pending ||
				st.Cancel.ProviderKey != "demo-request:"+ids[0]+":cancel" {
				t.Fatalf("delivery after the cancel = %+v (cancel %+v), want submitted with a pending cancel", st, st.Cancel)
			}
			e.desk.Faults(t, tt.faults)
			e.drain(t, d)
			st = e.status(t, ids[0])
			if st.State != delivery.Submitted || st.Cancel == nil || st.Cancel.State != delivery.Submitted || st.Cancel.ProviderReference == nil {
				t.Fatalf("delivery after the dispatcher = %+v (cancel %+v), want the cancel submitted with the desk's reference", st, st.Cancel)
			}
			if n := e.deskCancels(t, ids[0]); n != 1 || c.called["cancel"] != 1 || c.called["submit"] != 1 {
				t.Fatalf("%d cancels at the desk, calls %v: want one cancel sent once, one submit", n, c.called)
			}
			if tt.lookups != nil && (c.lookedUp["accepted"] != tt.lookups["accepted"] || c.called["cancel_status"] != 1) {
				t.Fatalf("lookups %v, calls %v: want the retry to ask the cancel's status once and find it", c.lookedUp, c.called)
			}
		})
	}
}

// TestACancelWhileTheDispatcherHoldsTheDelivery: the dispatcher has taken
// the row and is calling the desk when the cancel commits. The dispatcher
// wins: its attempt counts, so the cancel does not withdraw it (the desk
// may be accepting it right now) but queues a cancel at the desk. In the
// end the desk holds the submission once and its cancel once.
func TestACancelWhileTheDispatcherHoldsTheDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	d, c := e.dispatcher(8)
	e.desk.Faults(t, testenv.DeskFaults{HoldAnswer: "5s"}) // accepted, answered 5 s later: time for the cancel on a busy host
	done := make(chan error, 1)
	go func() { _, err := d.Once(context.Background()); done <- err }()
	if !testenv.Eventually(5*time.Second, func() bool { return e.desk.Submissions(t) == 1 }) {
		t.Fatal("the dispatcher did not reach the desk")
	}
	e.cancel(t, ids[0], "c-1") // while the desk holds its answer
	if st := e.status(t, ids[0]); st.State != delivery.Pending || st.Cancel == nil || st.Cancel.State != delivery.Pending {
		t.Fatalf("delivery while taken = %+v (cancel %+v), want still pending, with a pending cancel", st, st.Cancel)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.desk.Faults(t, testenv.DeskFaults{})
	e.drain(t, d)
	st := e.status(t, ids[0])
	if st.State != delivery.Submitted || st.Cancel == nil || st.Cancel.State != delivery.Submitted {
		t.Fatalf("delivery = %+v (cancel %+v), want submitted and its cancel submitted", st, st.Cancel)
	}
	if e.desk.Submissions(t) != 1 || e.deskCancels(t, ids[0]) != 1 || c.called["submit"] != 1 || c.called["cancel"] != 1 {
		t.Fatalf("%d submissions, %d cancels at the desk, calls %v: want one of each, each sent once",
			e.desk.Submissions(t), e.deskCancels(t, ids[0]), c.called)
	}
}

// TestACancelAfterAFailedAttemptIsNeverSubmitted: the desk refused the
// first attempt's connection (it was down), so the delivery counts an
// attempt but the desk never had it; the request is cancelled; the desk
// comes back. The dispatcher must not submit it: it asks the desk, finds
// nothing, and withdraws the delivery. A first attempt whose answer was
// lost after the desk took it (a timeout) is found by the same lookup: the
// delivery is submitted and the cancel reaches the desk.
func TestACancelAfterAFailedAttemptIsNeverSubmitted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		faults      testenv.DeskFaults
		state       string // the delivery in the end
		submissions int    // at the desk
	}{
		{"the desk was down", testenv.DeskFaults{Down: true, Only: []string{reviewdesk.Submissions}}, delivery.Withdrawn, 0},
		{"the answer was lost", testenv.DeskFaults{DropResponses: 1, Only: []string{reviewdesk.Submissions}}, delivery.Submitted, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ids := e.accept(t, 1)
			d, c := e.dispatcher(8)
			e.desk.Faults(t, tt.faults)
			if _, err := d.Once(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := e.status(t, ids[0]); st.State != delivery.Pending || st.Attempts != 1 {
				t.Fatalf("delivery after a failed attempt = %+v, want pending with one attempt", st)
			}
			e.cancel(t, ids[0], "c-1")
			if st := e.status(t, ids[0]); st.NextAttemptAt == nil || st.NextAttemptAt.After(e.clock.Now()) {
				t.Fatalf("delivery after the cancel = %+v, want due at once, so the desk is asked now", st)
			}
			e.desk.Faults(t, testenv.DeskFaults{})
			e.drain(t, d)
			st := e.status(t, ids[0])
			if st.State != tt.state || e.desk.Submissions(t) != tt.submissions {
				t.Fatalf("delivery = %+v, %d submissions at the desk (calls %v): want %s and %d",
					st, e.desk.Submissions(t), c.called, tt.state, tt.submissions)
			}
			if n := c.called["submit"]; n != 1 {
				t.Fatalf("%d submits sent (calls %v): want only the first attempt's", n, c.called)
			}
			if tt.submissions == 1 && e.deskCancels(t, ids[0]) != 1 {
				t.Fatalf("%d cancels at the desk: want the submission cancelled there once", e.deskCancels(t, ids[0]))
			}
		})
	}
}

// TestReconcileSettlesACancelThatEndedUnknown: the desk holds the
// submission, then takes no cancel until the cancel's attempts run out
// (unknown). Reconcile asks the desk about the cancel as it does about the
// submission: never received, it is queued again and the next attempt
// sends it, so the desk does not keep a live submission of a cancelled
// request; received, it is recorded as submitted without a send.
func TestReconcileSettlesACancelThatEndedUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	d, c := e.dispatcher(2)
	e.drain(t, d)
	e.cancel(t, ids[0], "c-1")
	e.desk.Faults(t, testenv.DeskFaults{Down: true, Only: []string{reviewdesk.Cancels}})
	e.drain(t, d)
	st := e.status(t, ids[0])
	if st.State != delivery.Submitted || st.Cancel == nil || st.Cancel.State != delivery.Unknown {
		t.Fatalf("delivery with the desk taking no cancel = %+v (cancel %+v), want submitted, its cancel unknown", st, st.Cancel)
	}
	e.desk.Faults(t, testenv.DeskFaults{})
	if st, err := d.Reconcile(context.Background(), "alice", ids[0]); err != nil || st.Cancel == nil || st.Cancel.State != delivery.Pending {
		t.Fatalf("reconcile = %+v (cancel %+v), %v; want the cancel queued again", st, st.Cancel, err)
	}
	e.drain(t, d)
	if st := e.status(t, ids[0]); st.Cancel == nil || st.Cancel.State != delivery.Submitted || e.deskCancels(t, ids[0]) != 1 {
		t.Fatalf("after the reconcile = %+v (cancel %+v), %d cancels at the desk: want it sent once", st, st.Cancel, e.deskCancels(t, ids[0]))
	}
	sent := c.called["cancel"]
	if st, err := d.Reconcile(context.Background(), "alice", ids[0]); err != nil || st.Cancel.State != delivery.Submitted || c.called["cancel"] != sent {
		t.Fatalf("a second reconcile = %+v, %v; want it as it is, nothing sent", st.Cancel, err)
	}
}
