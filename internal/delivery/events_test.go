package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// reopen makes alice's cancelled request id accepted again, as a service
// with a reopen writes it: the demo has none, a service made from it may.
func (e *env) reopen(t *testing.T, id string) {
	t.Helper()
	if _, err := e.db.Exec(`UPDATE demo_requests SET state = 'accepted', cancelled_at = NULL WHERE id = $1 AND state = 'cancelled'`, id); err != nil {
		t.Fatal(err)
	}
}

// TestEveryEventOfARequestReachesTheDeskOnce: cancel, reopen, cancel again.
// Each cancel is an event of its own in the outbox, with a key of its own
// at the desk, and the running dispatcher hands each to the desk exactly
// once; the delivery route shows the last one and lists both.
func TestEveryEventOfARequestReachesTheDeskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.store.Clock = nil // the database clock: the dispatcher runs for real
	id := e.accept(t, 1)[0]
	d, c := e.dispatcher(8)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { d.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	settled := func(what string, done func(delivery.Status) bool) {
		t.Helper()
		if !testenv.Eventually(10*time.Second, func() bool { return done(e.status(t, id)) }) {
			st := e.status(t, id)
			t.Fatalf("%s: delivery = %+v (cancel %+v)", what, st, st.Cancel)
		}
	}
	cancelSubmitted := func(n int) func(delivery.Status) bool {
		return func(st delivery.Status) bool {
			return len(st.Cancels) == n && st.Cancel != nil && st.Cancel.State == delivery.Submitted
		}
	}

	settled("the submission", func(st delivery.Status) bool { return st.State == delivery.Submitted })
	e.cancel(t, id, "c-1")
	settled("the first cancel", cancelSubmitted(1))
	e.reopen(t, id)
	if cr := e.cancel(t, id, "c-2"); !cr.Wrote {
		t.Fatalf("the second cancel, under a new key, = %+v: want it claimed and applied", cr)
	}
	settled("the second cancel", cancelSubmitted(2))

	st := e.status(t, id)
	first, second := st.Cancels[0], st.Cancels[1]
	if first.ProviderKey == second.ProviderKey || *st.Cancel != second ||
		first.State != delivery.Submitted || *first.ProviderReference == *second.ProviderReference {
		t.Fatalf("cancels = %+v, %+v (cancel %+v): want two, each under a key and a reference of its own, the last as cancel",
			first, second, st.Cancel)
	}
	sub := delivery.ProviderKey(id)
	for _, cn := range st.Cancels {
		if n := e.desk.Cancels(cn.ProviderKey, sub); n != 1 {
			t.Fatalf("the desk holds %d cancels under %s of %s, want 1", n, cn.ProviderKey, sub)
		}
	}
	if n := e.desk.Calls("POST /v1/submissions/{key}/cancel"); n != 2 || c.called["cancel"] != 2 || c.lookups != 0 {
		t.Fatalf("%d cancels sent to the desk, calls %v, %d lookups: want each cancel sent once, nothing asked", n, c.called, c.lookups)
	}
	if n := e.desk.Submissions(t); n != 1 || c.called["submit"] != 1 {
		t.Fatalf("%d submissions at the desk, calls %v: want the one, sent once", n, c.called)
	}
}
