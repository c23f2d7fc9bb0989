package delivery_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a demo database with its outbox, a double of the review desk's
// HTTP API over loopback (the external system; the stand-in desk itself is
// the full demo's), and a clock both the store and the test move.
type env struct {
	db    *sqlx.DB
	store *postgres.Store
	clock *testenv.Clock
	desk  *testenv.DeskDouble
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{db: pgtest.NewDB(t), clock: testenv.NewClock(), desk: testenv.StartDeskDouble(t)}
	e.store = pgtest.NewStore(e.db)
	e.store.Clock = e.clock.Now
	return e
}

// accept creates n accepted demo requests of alice, as the create does: the
// request, its key and its outbox row in one statement.
func (e *env) accept(t *testing.T, n int) []string {
	t.Helper()
	return e.acceptFor(t, "alice", n)
}

// acceptFor creates n accepted demo requests of actor.
func (e *env) acceptFor(t *testing.T, actor string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		r := demo.Request{ID: uuid.NewString(), Actor: actor, State: demo.StateAccepted,
			Topic: fmt.Sprintf("topic %d", i), CreatedAt: e.clock.Now()}
		d := idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte("{}"), ResultID: r.ID},
			Effect: e.store.CreateDemoRequest(r)}
		sc := idempotency.Scope{Actor: actor, Operation: "demo-requests.create", Key: r.ID}
		if _, err := e.store.CompleteAtomically(context.Background(), idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", time.Hour, d); err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
	}
	return ids
}

// dispatcher returns a dispatcher of e that counts what it does.
func (e *env) dispatcher(maxAttempts int) (*delivery.Dispatcher, *counts) {
	c := &counts{}
	return &delivery.Dispatcher{Store: e.store, Desk: e.desk.Client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: c, MaxAttempts: maxAttempts, CallTimeout: 10 * time.Second, Batch: 16, Idle: 20 * time.Millisecond}, c
}

// drain runs rounds, moving the clock past every backoff, until none is due.
func (e *env) drain(t *testing.T, d *delivery.Dispatcher) {
	t.Helper()
	for range 100 {
		n, err := d.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && e.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0 {
			return
		}
		e.clock.Advance(2 * time.Minute)
	}
	t.Fatal("the backlog did not drain in 100 rounds")
}

func (e *env) count(t *testing.T, q string, args ...any) int {
	return testenv.Count(t, e.db, q, args...)
}

func (e *env) status(t *testing.T, id string) delivery.Status {
	t.Helper()
	st, err := e.store.Delivery(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// counts is a delivery.Metrics that counts.
type counts struct {
	mu                      sync.Mutex
	submits, lookups, marks int
	calls                   int
	lookedUp, marked        map[string]int
	called                  map[string]int // by op: submit, submit_status, cancel, cancel_status
}

func (c *counts) Delivered(state string, _ int) { c.add(&c.marks, &c.marked, state) }
func (c *counts) LookedUp(answer string)        { c.add(&c.lookups, &c.lookedUp, answer) }
func (c *counts) Called(op string) {
	c.add(&c.calls, &c.called, op)
	if op == "submit" {
		c.mu.Lock()
		c.submits++
		c.mu.Unlock()
	}
}

func (c *counts) add(n *int, by *map[string]int, label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*n++
	if *by == nil {
		*by = map[string]int{}
	}
	(*by)[label]++
}

// TestEachRequestIsSubmittedOnceWithOneCall: the fault-free case costs one
// call per delivery, no lookup, and records the desk's reference.
func TestEachRequestIsSubmittedOnceWithOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 40)
	d, c := e.dispatcher(8)
	e.drain(t, d)
	if n := e.desk.Submissions(t); n != len(ids) {
		t.Fatalf("the desk holds %d submissions, want %d", n, len(ids))
	}
	if c.submits != len(ids) || c.lookups != 0 {
		t.Fatalf("%d submits and %d lookups for %d deliveries, want one submit each and no lookup", c.submits, c.lookups, len(ids))
	}
	st := e.status(t, ids[0])
	if st.State != delivery.Submitted || st.Attempts != 1 || st.ProviderReference == nil || st.NextAttemptAt != nil ||
		st.ProviderKey != "demo-request:"+ids[0] {
		t.Fatalf("delivery = %+v, want submitted once with a reference", st)
	}
	if rc, _, ok := e.desk.Submission(st.ProviderKey); !ok || rc.Reference != *st.ProviderReference {
		t.Fatalf("the desk holds no submission under %s with reference %s", st.ProviderKey, *st.ProviderReference)
	}
}

// TestLostAnswerIsLookedUpNotResent: the desk accepts and drops its answer;
// the next attempt asks first, finds it accepted, and sends nothing.
func TestLostAnswerIsLookedUpNotResent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	d, c := e.dispatcher(8)
	e.desk.Faults(t, testenv.DeskFaults{DropResponses: 1})
	if _, err := d.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t, ids[0]); st.State != delivery.Pending || st.LastError == nil || st.NextAttemptAt == nil {
		t.Fatalf("after a dropped answer: %+v, want pending with the error and a next try", st)
	}
	e.drain(t, d)
	if st := e.status(t, ids[0]); st.State != delivery.Submitted || st.Attempts != 2 {
		t.Fatalf("after the lookup: %+v, want submitted on the second attempt", st)
	}
	if c.submits != 1 || c.lookedUp["accepted"] != 1 || e.desk.Submissions(t) != 1 {
		t.Fatalf("%d submits, lookups %v, %d submissions: want 1 submit, 1 lookup that found it, 1 submission",
			c.submits, c.lookedUp, e.desk.Submissions(t))
	}
}

// TestBacklogGrowsWhileTheDeskIsDownAndDrains: while the desk is down
// nothing is lost and the backlog grows; once it is back each request is
// submitted exactly once.
func TestBacklogGrowsWhileTheDeskIsDownAndDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.accept(t, 20)
	d, c := e.dispatcher(8)
	e.desk.Faults(t, testenv.DeskFaults{Down: true})
	for range 3 {
		if _, err := d.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.accept(t, 10)
		e.clock.Advance(time.Minute)
	}
	n, oldest, err := e.store.Backlog(context.Background())
	if err != nil || n != 50 || oldest < 2*time.Minute {
		t.Fatalf("backlog while down = %d, oldest due %v, %v; want 50, due for minutes", n, oldest, err)
	}
	e.desk.Faults(t, testenv.DeskFaults{})
	c.submits = 0
	e.drain(t, d)
	if got := e.desk.Submissions(t); got != 50 {
		t.Fatalf("the desk holds %d submissions, want 50", got)
	}
	if c.submits != 50 {
		t.Fatalf("%d submits once the desk was back, want 50 (one each)", c.submits)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE state = 'submitted'`); n != 50 {
		t.Fatalf("%d submitted deliveries, want 50", n)
	}
}

// TestRacingDispatchersSendEachRowOnce: two dispatchers, each with several
// rounds at once, share a backlog of hundreds of rows; no row is sent twice
// (the desk would hide a second send, so the sends are counted), and both
// do work.
func TestRacingDispatchersSendEachRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.store.Clock = nil // the database clock: the dispatchers run for real
	const rows = 400
	e.accept(t, rows)
	one, c1 := e.dispatcher(8)
	two, c2 := e.dispatcher(8)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { one.Run(ctx) })
	wg.Go(func() { two.Run(ctx) })
	ok := testenv.Eventually(30*time.Second, func() bool {
		return e.count(t, `SELECT count(*) FROM outbox WHERE state = 'submitted'`) == rows
	})
	cancel()
	wg.Wait()
	if !ok {
		t.Fatalf("%d of %d submitted in 30 s", e.count(t, `SELECT count(*) FROM outbox WHERE state = 'submitted'`), rows)
	}
	if c1.submits+c2.submits != rows || c1.lookups+c2.lookups != 0 {
		t.Fatalf("%d + %d submits and %d lookups for %d rows, want one submit each", c1.submits, c2.submits, c1.lookups+c2.lookups, rows)
	}
	if c1.submits == 0 || c2.submits == 0 {
		t.Fatalf("one dispatcher did all the work: %d and %d", c1.submits, c2.submits)
	}
	if n := e.desk.Submissions(t); n != rows {
		t.Fatalf("the desk holds %d submissions, want %d", n, rows)
	}
}

// TestAStaleDispatcherChangesNothing: a dispatcher whose lease passed and
// whose row another took records nothing; the new holder's mark counts.
func TestAStaleDispatcherChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	ctx := context.Background()
	stale, fresh := uuid.NewString(), uuid.NewString()
	if due, err := e.store.TakeDue(ctx, stale, 10, time.Second, nil); err != nil || len(due) != 1 || due[0].Attempt != 1 {
		t.Fatalf("take = %+v, %v", due, err)
	}
	if due, err := e.store.TakeDue(ctx, fresh, 10, time.Second, nil); err != nil || len(due) != 0 {
		t.Fatalf("a row under a live lease was taken again: %+v, %v", due, err)
	}
	e.clock.Advance(2 * time.Second)
	if due, err := e.store.TakeDue(ctx, fresh, 10, time.Second, nil); err != nil || len(due) != 1 || due[0].Attempt != 2 {
		t.Fatalf("take after the lease = %+v, %v; want it again, as attempt 2", due, err)
	}
	n, err := e.store.Settle(ctx, []delivery.Mark{{RequestID: ids[0], Actor: "alice", Token: stale, State: delivery.Failed, Error: "stale"}})
	if err != nil || n != 0 {
		t.Fatalf("the stale mark recorded %d rows (%v), want 0", n, err)
	}
	n, err = e.store.Settle(ctx, []delivery.Mark{{RequestID: ids[0], Actor: "alice", Token: fresh, State: delivery.Submitted, Reference: "RD-1"}})
	if err != nil || n != 1 {
		t.Fatalf("the holder's mark recorded %d rows (%v), want 1", n, err)
	}
	if st := e.status(t, ids[0]); st.State != delivery.Submitted {
		t.Fatalf("delivery = %+v, want submitted", st)
	}
}

// TestGiveUpAndReconcile: a definite refusal fails the delivery; attempts
// that run out leave it unknown; reconcile asks the desk and records its
// answer, sending nothing itself.
func TestGiveUpAndReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("refused is failed", func(t *testing.T) {
		e := newEnv(t)
		ids := e.accept(t, 1)
		d, c := e.dispatcher(3)
		e.desk.Faults(t, testenv.DeskFaults{Refuse: true})
		e.drain(t, d)
		if st := e.status(t, ids[0]); st.State != delivery.Failed || st.Attempts != 1 || st.LastError == nil {
			t.Fatalf("delivery = %+v, want failed after one attempt, with the refusal", st)
		}
		if c.marked[delivery.Failed] != 1 {
			t.Fatalf("marks %v, want one failed", c.marked)
		}
	})

	t.Run("accepted but unclear until the attempts ran out: reconcile finds it", func(t *testing.T) {
		e := newEnv(t)
		ids := e.accept(t, 1)
		d, c := e.dispatcher(3)
		// The first answer is lost; the desk then fails every lookup.
		e.desk.Faults(t, testenv.DeskFaults{DropResponses: 1})
		if _, err := d.Once(ctx); err != nil {
			t.Fatal(err)
		}
		e.desk.Faults(t, testenv.DeskFaults{FailNext: 100})
		e.drain(t, d)
		st := e.status(t, ids[0])
		if st.State != delivery.Unknown || st.Attempts != 3 || st.NextAttemptAt != nil {
			t.Fatalf("delivery = %+v, want unknown after 3 attempts, not due again", st)
		}
		if c.marked[delivery.Unknown] != 1 || c.lookedUp["unclear"] != 2 {
			t.Fatalf("marks %v, lookups %v: want one unknown after two unclear lookups", c.marked, c.lookedUp)
		}
		if _, err := d.Reconcile(ctx, "alice", ids[0]); apperr.Code(err) != apperr.Unavailable {
			t.Fatalf("reconcile while the desk fails: %v, want unavailable", err)
		}
		e.desk.Faults(t, testenv.DeskFaults{})
		for range 2 { // it is safe to repeat
			st, err := d.Reconcile(ctx, "alice", ids[0])
			if err != nil || st.State != delivery.Submitted || st.ProviderReference == nil {
				t.Fatalf("reconcile = %+v, %v; want submitted with the desk's reference", st, err)
			}
		}
		if c.submits != 1 || e.desk.Submissions(t) != 1 {
			t.Fatalf("%d submits, %d submissions: reconcile must not send", c.submits, e.desk.Submissions(t))
		}
	})

	t.Run("never accepted: reconcile queues it again and it is sent once", func(t *testing.T) {
		e := newEnv(t)
		ids := e.accept(t, 1)
		d, c := e.dispatcher(2)
		e.desk.Faults(t, testenv.DeskFaults{Down: true})
		e.drain(t, d)
		if st := e.status(t, ids[0]); st.State != delivery.Unknown {
			t.Fatalf("delivery = %+v, want unknown", st)
		}
		e.desk.Faults(t, testenv.DeskFaults{})
		c.submits = 0
		st, err := d.Reconcile(ctx, "alice", ids[0])
		if err != nil || st.State != delivery.Pending || st.Attempts != 0 || c.submits != 0 {
			t.Fatalf("reconcile = %+v, %v (%d submits); want pending again, nothing sent", st, err, c.submits)
		}
		e.drain(t, d)
		if st := e.status(t, ids[0]); st.State != delivery.Submitted || e.desk.Submissions(t) != 1 || c.submits != 1 {
			t.Fatalf("delivery = %+v, %d submissions, %d submits; want submitted by one send", st, e.desk.Submissions(t), c.submits)
		}
	})

	t.Run("another actor's request is not found", func(t *testing.T) {
		e := newEnv(t)
		ids := e.accept(t, 1)
		d, _ := e.dispatcher(2)
		if _, err := d.Reconcile(ctx, "bob", ids[0]); apperr.Code(err) != apperr.NotFound {
			t.Fatalf("bob reconciles alice's request: %v, want not_found", err)
		}
		if _, err := d.Store.Delivery(ctx, "bob", ids[0]); apperr.Code(err) != apperr.NotFound {
			t.Fatalf("bob reads alice's delivery: %v, want not_found", err)
		}
	})
}

// TestRunBacksOffWhileTheDatabaseIsGone: takes that fail in a row pause
// longer each time, so a database gone for long is not asked, and logged,
// dozens of times a second.
func TestRunBacksOffWhileTheDatabaseIsGone(t *testing.T) {
	testenv.Long(t, "fault: the database is gone")
	t.Parallel()
	e := newEnv(t)
	e.db.Close() // every take now fails
	var logs testenv.Buffer
	d := &delivery.Dispatcher{Store: e.store, Desk: e.desk.Client, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	d.Run(ctx)
	// At a steady 200 ms pause it would fail about 20 times; doubling
	// pauses (0.2, 0.4, 0.8, 1.6 s, …) about 5.
	if n := strings.Count(logs.String(), "dispatch take failed"); n == 0 || n > 10 {
		t.Fatalf("%d failed takes logged in 4 s, want 10 at most (and at least one)", n)
	}
}

// TestASlowCallHoldsOnlyItsOwnDelivery: one actor's desk calls hang (each
// held 30 s, inside the call's deadline); another actor's request is
// submitted within seconds all the same, whether the dispatcher took it
// together with a held one or after a flood of held ones.
func TestASlowCallHoldsOnlyItsOwnDelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		held int // mallory's requests, accepted just before alice's
	}{{"taken with a held one", 1}, {"after a flood of held ones", 600}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.store.Clock = nil // the database clock: the dispatcher runs for real
			e.desk.Faults(t, testenv.DeskFaults{HoldAnswer: "30s", Account: "mallory"})
			// The defaults, but for a call deadline past the hold.
			d := &delivery.Dispatcher{Store: e.store, Desk: e.desk.Client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				CallTimeout: time.Minute}
			mallorys := e.acceptFor(t, "mallory", tc.held)
			alices := e.accept(t, 1)
			start := time.Now()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { d.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			const within = 10 * time.Second // a third of the hold
			if !testenv.Eventually(within, func() bool { return e.status(t, alices[0]).State == delivery.Submitted }) {
				t.Fatalf("alice's request is %s %v after the dispatcher started, while mallory's calls are held",
					e.status(t, alices[0]).State, time.Since(start).Round(time.Millisecond))
			}
			t.Logf("alice's request submitted %v after the dispatcher started", time.Since(start).Round(time.Millisecond))
			if st, err := e.store.Delivery(context.Background(), "mallory", mallorys[0]); err != nil || st.State != delivery.Pending {
				t.Fatalf("mallory's delivery = %+v, %v; want pending while its call is held", st, err)
			}
		})
	}
}

// emptyTakes is a Store that counts the takes that leave some actors' rows
// and find nothing else.
type emptyTakes struct {
	delivery.Store
	mu sync.Mutex
	n  int
}

func (s *emptyTakes) TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	due, err := s.Store.TakeDue(ctx, token, n, lease, busy)
	if err == nil && len(due) == 0 && len(busy) > 0 {
		s.mu.Lock()
		s.n++
		s.mu.Unlock()
	}
	return due, err
}

// TestAnActorAtItsShareIsReadOncePerPause: one actor's backlog drains with
// the actor at its share most of the time. A take that leaves its rows
// reads all of them, so after one that found nothing else the dispatcher
// waits for the actor to free a place or for a pause, instead of reading
// them again at each freed place: at most one such take per pause.
func TestAnActorAtItsShareIsReadOncePerPause(t *testing.T) {
	testenv.Long(t, "drains 1,000 rows")
	t.Parallel()
	e := newEnv(t)
	e.store.Clock = nil // the database clock: the dispatcher runs for real
	const rows, idle = 1000, 200 * time.Millisecond
	e.accept(t, rows)
	store := &emptyTakes{Store: e.store}
	d := &delivery.Dispatcher{Store: store, Desk: e.desk.Client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Batch: 8, InFlight: 64, PerActor: 16, Idle: idle}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { d.Run(ctx); close(done) }()
	ok := testenv.Eventually(60*time.Second, func() bool {
		return e.count(t, `SELECT count(*) FROM outbox WHERE state = 'submitted'`) == rows
	})
	took := time.Since(start)
	cancel()
	<-done
	if !ok {
		t.Fatalf("%d of %d submitted in 60 s", e.count(t, `SELECT count(*) FROM outbox WHERE state = 'submitted'`), rows)
	}
	if most := int(took/idle) + 2; store.n > most {
		t.Fatalf("%d takes found only the busy actor's rows in %v, want at most one per pause (%d)", store.n, took, most)
	}
	t.Logf("%d rows in %v: %d takes found only the busy actor's rows", rows, took.Round(time.Millisecond), store.n)
}

// slowSettle is a Store whose Settle takes wait before it writes, or ends
// with its context.
type slowSettle struct {
	delivery.Store
	wait time.Duration
}

func (s slowSettle) Settle(ctx context.Context, marks []delivery.Mark) (int, error) {
	select {
	case <-time.After(s.wait):
		return s.Store.Settle(ctx, marks)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestAMarkSlowerThanADeskCallIsRecorded: recording a mark is a database
// write, bounded by the row's lease, not by a call to the desk. A mark that
// takes longer than CallTimeout (a loaded database, a settle through a
// Citus coordinator) is still recorded, so the row is not handed over again.
func TestAMarkSlowerThanADeskCallIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.accept(t, 1)
	d, _ := e.dispatcher(8)
	d.CallTimeout = 200 * time.Millisecond
	d.Store = slowSettle{Store: e.store, wait: 2 * d.CallTimeout}
	if _, err := d.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t, ids[0]); st.State != delivery.Submitted || st.Attempts != 1 {
		t.Fatalf("delivery = %s after %d attempts, want submitted after 1: the slow mark was dropped", st.State, st.Attempts)
	}
}
