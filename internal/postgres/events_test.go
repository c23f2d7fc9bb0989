package postgres_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
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
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestAThirdOperationsEventsReachTheDeskInOrder adds a reopen the way the
// "A second operation" of docs/operations.md says: its function in a migration of its
// own (testdata/migrations), which writes the key with write_key and,
// where it did, queues a "reopen" event beside the request it changes, in
// one phase and as a claim's finish; its statement
// (testdata/reopen_demo_request.sql); a typed constructor of its
// effect; and its event's hand-over to the desk (Dispatcher.Kinds, as a test
// adds a kind; a service adds its own to delivery's kinds). A
// request is created and delivered, then cancelled, reopened, cancelled
// and reopened again, on both paths, before the dispatcher runs: each
// transition queued its event, and the dispatcher hands them to the desk
// one at a time, in the order they were queued, each once under a key of
// its own.
func TestAThirdOperationsEventsReachTheDeskInOrder(t *testing.T) {
	t.Parallel()
	e := newReopenEnv(t)
	r := e.request
	once := func() int {
		t.Helper()
		n, err := e.dispatcher.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
	if n := once(); n != 1 || e.desk.Submissions(t) != 1 {
		t.Fatalf("the first dispatch took %d rows and the desk holds %d submissions, want the one", n, e.desk.Submissions(t))
	}
	e.sends.reset()
	e.do(t, "demo-requests.cancel", "cancel-1", idempotency.OnePhase, e.store.CancelDemoRequest(cancelledNow(r)))
	e.do(t, "demo-requests.reopen", "reopen-1", idempotency.OnePhase, e.reopen(r))
	e.do(t, "demo-requests.cancel", "cancel-2", idempotency.TwoPhase, e.store.CancelDemoRequest(cancelledNow(r)))
	e.do(t, "demo-requests.reopen", "reopen-2", idempotency.TwoPhase, e.reopen(r))

	// All four are due at once: each take hands over the earliest alone.
	for i, want := range []string{delivery.KindCancel, "reopen", delivery.KindCancel, "reopen"} {
		if n := once(); n != 1 || e.sends.last() != want {
			t.Fatalf("take %d: %d rows, sends %v; want one, a %s", i+1, n, e.sends.all(), want)
		}
	}
	if n := once(); n != 0 {
		t.Fatalf("a take after the four took %d rows, want none", n)
	}
	st, err := e.store.Delivery(context.Background(), r.Actor, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	sub := delivery.ProviderKey(r.ID)
	wantKeys := []string{sub + ":cancel", sub + ":reopen", sub + ":cancel:2", sub + ":reopen:2"}
	if _, keys := e.checkDelivered(t, st); !slices.Equal(keys, wantKeys) || st.Cancel == nil || st.Cancel.ProviderKey != wantKeys[2] {
		t.Fatalf("events under %v (cancel %+v); want %v, the second cancel as cancel", keys, st.Cancel, wantKeys)
	}
}

// TestAReopenPutsAWithdrawnSubmissionBack: the rule between a reverse
// transition and a withdrawn submission. A cancel before the dispatcher's
// first take withdraws the submission (the desk never got it) and queues no
// cancel; a reopen after it puts the submission back to pending and queues
// no reopen, so that the desk never hears of a request it never got.
// create → cancel → reopen → cancel → reopen, on both paths, before the
// dispatcher runs: the desk ends with the request, once and not cancelled,
// and nothing else.
func TestAReopenPutsAWithdrawnSubmissionBack(t *testing.T) {
	t.Parallel()
	e := newReopenEnv(t)
	r := e.request
	e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
	e.do(t, "demo-requests.cancel", "cancel-1", idempotency.OnePhase, e.store.CancelDemoRequest(cancelledNow(r)))
	e.do(t, "demo-requests.reopen", "reopen-1", idempotency.OnePhase, e.reopen(r))
	e.do(t, "demo-requests.cancel", "cancel-2", idempotency.TwoPhase, e.store.CancelDemoRequest(cancelledNow(r)))
	e.do(t, "demo-requests.reopen", "reopen-2", idempotency.TwoPhase, e.reopen(r))
	for range 10 {
		if n, err := e.dispatcher.Once(context.Background()); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			break
		}
	}
	e.mu.Lock()
	reopens := len(e.reopens)
	e.mu.Unlock()
	if sent := e.sends.sent(); !slices.Equal(sent, []string{delivery.KindSubmit}) || e.desk.Submissions(t) != 1 ||
		e.desk.AllCancels(t) != 0 || reopens != 0 {
		t.Fatalf("the dispatcher sent %v; the desk holds %d submissions, %d cancels, %d reopens; want the submission alone",
			sent, e.desk.Submissions(t), e.desk.AllCancels(t), reopens)
	}
	st, err := e.store.Delivery(context.Background(), r.Actor, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != delivery.Submitted || len(st.Events) != 0 {
		t.Fatalf("the delivery: %s with events %+v; want submitted, no event", st.State, st.Events)
	}
	if now, err := e.store.DemoRequest(context.Background(), r.Actor, r.ID); err != nil || now.State != demo.StateAccepted {
		t.Fatalf("the request: %+v, %v; want it accepted", now, err)
	}
}

// TestAWithdrawalYieldsToAReopen: the rule between the dispatcher's
// withdrawal and a reopen. A submission tried once (the desk did not
// answer) and then cancelled is due again, for the dispatcher to ask the
// desk and withdraw it if it never got there; a reopen between that take and
// its mark finds the submission still pending (not withdrawn, so nothing to
// put back) and queues its reopen after the cancel. The mark then withdraws
// the submission only while its request is still cancelled: here it stays
// pending, and the desk gets the request, its cancel and its reopen, once
// each and in order, and ends with it open.
func TestAWithdrawalYieldsToAReopen(t *testing.T) {
	t.Parallel()
	e := newReopenEnv(t)
	r := e.request
	ctx := context.Background()
	settle := func(d delivery.Due, token, state string) {
		t.Helper()
		m := delivery.Mark{RequestID: d.RequestID, Kind: d.Kind, Seq: d.Seq, Attempt: d.Attempt, Token: token, Actor: d.Actor, State: state}
		if n, err := e.store.Settle(ctx, []delivery.Mark{m}); err != nil || n != 1 {
			t.Fatalf("settle %s: %d, %v", state, n, err)
		}
	}
	e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
	token := uuid.NewString()
	first, err := e.store.TakeDue(ctx, token, 16, time.Minute, nil)
	if err != nil || len(first) != 1 {
		t.Fatalf("the first take: %+v, %v", first, err)
	}
	settle(first[0], token, delivery.Pending) // the desk did not answer: tried again later
	e.do(t, "demo-requests.cancel", "cancel", idempotency.OnePhase, e.store.CancelDemoRequest(cancelledNow(r)))

	token = uuid.NewString()
	again, err := e.store.TakeDue(ctx, token, 16, time.Minute, nil)
	if err != nil || len(again) != 1 || !again[0].Cancelled || again[0].Kind != delivery.KindSubmit {
		t.Fatalf("the take after the cancel: %+v, %v; want the cancelled submission", again, err)
	}
	e.do(t, "demo-requests.reopen", "reopen", idempotency.OnePhase, e.reopen(r))
	settle(again[0], token, delivery.Withdrawn) // the desk never got it, as the dispatcher found
	for range 10 {
		if n, err := e.dispatcher.Once(ctx); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			break
		}
	}
	st, err := e.store.Delivery(ctx, r.Actor, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != delivery.Submitted || e.desk.Submissions(t) != 1 {
		t.Fatalf("the submission: %s, the desk holds %d (the dispatcher sent %v); want it submitted, once",
			st.State, e.desk.Submissions(t), e.sends.sent())
	}
	if sent := e.sends.sent(); !slices.Equal(sent, []string{delivery.KindSubmit, delivery.KindCancel, "reopen"}) {
		t.Fatalf("the dispatcher sent %v, want the submission, its cancel, its reopen", sent)
	}
	sub := delivery.ProviderKey(r.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(st.Events) != 2 || e.desk.Cancels(sub+":cancel", sub) != 1 || e.reopens[sub+":reopen"] != 1 {
		t.Fatalf("events %+v; the desk holds %d cancels, reopens %v; want the cancel and the reopen once each",
			st.Events, e.desk.Cancels(sub+":cancel", sub), e.reopens)
	}
}

// TestAWithdrawalRacesAReopen: the same rule under a race. A submission
// tried once and then cancelled is due; a dispatcher runs while the reopen
// commits, before, during or after the dispatcher's withdrawal. Whichever
// way it falls, the desk gets the submission once, and the cancel and the
// reopen once each, the reopen last: the submission before the cancel (the
// reopen came first, or the withdrawal yielded to it), or after it (the
// withdrawal came first, the cancel went, and the reopen put the submission
// back). Any other outcome breaks the rule.
func TestAWithdrawalRacesAReopen(t *testing.T) {
	t.Parallel()
	orders := map[string]int{}
	for round := range 12 {
		e := newReopenEnv(t)
		r := e.request
		ctx, stop := context.WithCancel(context.Background())
		e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
		token := uuid.NewString()
		first, err := e.store.TakeDue(ctx, token, 16, time.Minute, nil)
		if err != nil || len(first) != 1 {
			t.Fatalf("the first take: %+v, %v", first, err)
		}
		d := first[0]
		m := delivery.Mark{RequestID: d.RequestID, Kind: d.Kind, Seq: d.Seq, Attempt: d.Attempt, Token: token, Actor: d.Actor,
			State: delivery.Pending, Retry: time.Hour} // the desk did not answer; the cancel makes it due now
		if n, err := e.store.Settle(ctx, []delivery.Mark{m}); err != nil || n != 1 {
			t.Fatalf("settle: %d, %v", n, err)
		}
		e.do(t, "demo-requests.cancel", "cancel", idempotency.OnePhase, e.store.CancelDemoRequest(cancelledNow(r)))

		var running sync.WaitGroup
		running.Go(func() { e.dispatcher.Run(ctx) })
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		e.do(t, "demo-requests.reopen", "reopen", idempotency.OnePhase, e.reopen(r))
		settled := testenv.Eventually(30*time.Second, func() bool {
			return testenv.Count(t, e.db, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
		})
		stop()
		running.Wait()
		if !settled {
			t.Fatalf("round %d: events still pending 30 s after the reopen (sent %v)", round, e.sends.sent())
		}
		sent := e.sends.sent()
		sub := delivery.ProviderKey(r.ID)
		e.mu.Lock()
		reopens := e.reopens[sub+":reopen"]
		e.mu.Unlock()
		if !slices.Equal(sent, []string{delivery.KindSubmit, delivery.KindCancel, "reopen"}) &&
			!slices.Equal(sent, []string{delivery.KindCancel, delivery.KindSubmit, "reopen"}) ||
			e.desk.Submissions(t) != 1 || e.desk.Cancels(sub+":cancel", sub) != 1 || reopens != 1 {
			t.Fatalf("round %d: the dispatcher sent %v; the desk holds %d submissions, %d cancels, %d reopens; "+
				"want each once, the reopen last", round, sent, e.desk.Submissions(t), e.desk.Cancels(sub+":cancel", sub), reopens)
		}
		orders[strings.Join(sent, " ")]++
	}
	t.Logf("orders the desk saw: %v", orders)
}

// TestTransitionsRaceTheDispatcher: the rule between a request's
// transitions and the dispatcher is that the desk gets a request's events
// once each, in the order their transitions committed. Cancels and reopens
// of one request race each other on both paths while a dispatcher runs.
// Each is applied (its event queued), refused (the request is not in the
// state it leaves: 422, nothing queued), or answered 503 to be sent again
// (it met a transition that committed while it ran); nothing else. The
// events then alternate cancel and reopen, as the transitions must, and
// the desk got each once, in that order.
func TestTransitionsRaceTheDispatcher(t *testing.T) {
	t.Parallel()
	e := newReopenEnv(t)
	r := e.request
	e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
	if n, err := e.dispatcher.Once(context.Background()); err != nil || n != 1 {
		t.Fatalf("the first dispatch: %d, %v", n, err)
	}
	e.sends.reset()

	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { e.dispatcher.Run(ctx) })
	defer func() { stop(); running.Wait() }()

	const workers, each = 6, 6
	var mu sync.Mutex
	answers := map[int]int{} // by status, 503 for an error of code unavailable
	var race sync.WaitGroup
	for w := range workers {
		race.Go(func() {
			for i := range each {
				op, from, effect := "demo-requests.cancel", demo.StateAccepted, e.store.CancelDemoRequest(cancelledNow(r))
				if (w+i)%2 == 1 {
					op, from, effect = "demo-requests.reopen", demo.StateCancelled, e.reopen(r)
				}
				path := []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase}[i%2]
				key := fmt.Sprintf("%s-%d-%d", op, w, i)
				res, err := e.runner.Do(context.Background(),
					idempotency.Request{Scope: idempotency.Scope{Actor: r.Actor, Operation: op, Key: key}, Fingerprint: key, Path: path},
					func(ctx context.Context, _ time.Time) (idempotency.Answer, error) {
						now, err := e.store.DemoRequest(ctx, r.Actor, r.ID)
						if err != nil {
							return idempotency.Answer{}, err
						}
						if now.State != from {
							return idempotency.Answer{Response: idempotency.Response{Status: 422, Body: []byte("{}")}}, nil
						}
						return idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte("{}"), ResultID: r.ID}, Effect: effect}, nil
					})
				status := res.Response.Status
				if apperr.Code(err) == apperr.Unavailable {
					status = 503
				} else if err != nil || (status != 200 && status != 422) {
					t.Errorf("%s on the %s path: %+v, %v; want 200, 422 or 503", key, path, res, err)
				}
				mu.Lock()
				answers[status]++
				mu.Unlock()
			}
		})
	}
	race.Wait()
	if !testenv.Eventually(30*time.Second, func() bool {
		return testenv.Count(t, e.db, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	}) {
		t.Fatal("events still pending 30 s after the race")
	}
	stop()
	running.Wait()

	st, err := e.store.Delivery(context.Background(), r.Actor, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := e.checkDelivered(t, st)
	if len(kinds) != answers[200] || answers[200] == 0 {
		t.Fatalf("%d events for %d applied transitions", len(kinds), answers[200])
	}
	for i, k := range kinds {
		if want := []string{delivery.KindCancel, "reopen"}[i%2]; k != want {
			t.Fatalf("events %v: the %d-th is a %s, want a %s: transitions alternate", kinds, i+1, k, want)
		}
	}
	t.Logf("answers by status %v; the desk got %v", answers, e.sends.all())
}

// reopenEnv is a store, a Runner and a dispatcher on a database of its own,
// with the desk double and a server of the test's own for the reopen's desk
// call, and one request of alice's not yet created.
type reopenEnv struct {
	db         *sqlx.DB
	store      *postgres.Store
	runner     *idempotency.Runner
	dispatcher *delivery.Dispatcher
	desk       *testenv.DeskDouble
	sends      *sendLog
	request    demo.Request
	reopen     func(demo.Request) idempotency.Effect

	mu      sync.Mutex
	reopens map[string]int // the desk's reopens, by key
}

// newReopenEnv adds the reopen the way docs/operations.md's list says: its
// function and statement (testdata/), a typed constructor of its effect,
// and its event's hand-over to the desk (Dispatcher.Kinds).
func newReopenEnv(t *testing.T) *reopenEnv {
	e := &reopenEnv{db: pgtest.NewDB(t), desk: testenv.StartDeskDouble(t), sends: &sendLog{}, reopens: map[string]int{},
		request: demo.Request{ID: uuid.NewString(), Actor: "alice", State: demo.StateAccepted, Topic: "billing",
			CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}}
	e.store = pgtest.NewStore(e.db)
	var err error
	if e.runner, err = idempotency.NewRunner(idempotency.Config{Store: e.store, TTL: time.Hour, Lease: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	readSQL := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	withReopen(t, e.db)
	reopen := readSQL("reopen_demo_request.sql")
	e.reopen = func(r demo.Request) idempotency.Effect {
		return postgres.KeyWriteEffect("reopen demo request", reopen, r.ID)
	}
	reopenDesk := testenv.ServeUntilTheEnd(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.reopens[req.Header.Get(reviewdesk.IdempotencyKeyHeader)]++
		w.WriteHeader(http.StatusCreated)
	}))
	e.dispatcher = &delivery.Dispatcher{Store: e.store, Desk: e.desk.Client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: e.sends, Batch: 16, Idle: 10 * time.Millisecond,
		Kinds: map[string]delivery.Kind{"reopen": {
			Send: func(ctx context.Context, key string, _ delivery.Due) (reviewdesk.Receipt, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, reopenDesk.URL+"/reopen", nil)
				req.Header.Set(reviewdesk.IdempotencyKeyHeader, key)
				resp, err := reopenDesk.Client().Do(req)
				if err != nil {
					return reviewdesk.Receipt{}, err
				}
				resp.Body.Close()
				return reviewdesk.Receipt{Reference: "reopened:" + key}, nil
			},
			Status: func(context.Context, string) (reviewdesk.Receipt, error) {
				return reviewdesk.Receipt{}, reviewdesk.ErrNotFound
			},
		}}}
	return e
}

// withReopen gives db the reopen's function as a service gives a schema its
// own migrations: migrated after the template's, then distributed (on
// Citus, its function delegated as the store's are).
func withReopen(t *testing.T, db *sqlx.DB) {
	t.Helper()
	if err := postgres.MigrateFS(db, os.DirFS("testdata"), "migrations", "reopen_migrations", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Distribute(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}

// do runs op under key on path p, its work answering 200 with effect, and
// wants it applied.
func (e *reopenEnv) do(t *testing.T, op, key string, p idempotency.Path, effect idempotency.Effect) {
	t.Helper()
	res, err := e.runner.Do(context.Background(),
		idempotency.Request{Scope: idempotency.Scope{Actor: e.request.Actor, Operation: op, Key: key}, Fingerprint: key, Path: p},
		func(context.Context, time.Time) (idempotency.Answer, error) {
			return idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte("{}"), ResultID: e.request.ID}, Effect: effect}, nil
		})
	if err != nil || res.Replayed {
		t.Fatalf("%s %s: %+v, %v; want it applied", op, key, res, err)
	}
}

// checkDelivered checks that every event of st was submitted, that the
// dispatcher sent them in their order and the desk holds each once, and
// returns their kinds and keys.
func (e *reopenEnv) checkDelivered(t *testing.T, st delivery.Status) (kinds, keys []string) {
	t.Helper()
	for _, ev := range st.Events {
		kinds, keys = append(kinds, ev.Kind), append(keys, ev.ProviderKey)
		if ev.State != delivery.Submitted {
			t.Errorf("event %s: %s, want submitted", ev.ProviderKey, ev.State)
		}
	}
	if sent := e.sends.sent(); !slices.Equal(sent, kinds) {
		t.Fatalf("the dispatcher sent %v, want the events in their order: %v", sent, kinds)
	}
	sub := delivery.ProviderKey(e.request.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, ev := range st.Events {
		held := e.reopens[keys[i]]
		if ev.Kind == delivery.KindCancel {
			held = e.desk.Cancels(keys[i], sub)
		}
		if held != 1 {
			t.Errorf("the desk holds %d of %s, want 1", held, keys[i])
		}
	}
	return kinds, keys
}

func cancelledNow(r demo.Request) demo.Request {
	at := time.Now().UTC().Truncate(time.Microsecond)
	r.State, r.CancelledAt = demo.StateCancelled, &at
	return r
}

// sendLog is a delivery.Metrics that keeps the desk calls in their order.
type sendLog struct {
	mu    sync.Mutex
	calls []string
}

func (*sendLog) Delivered(string, int) {}
func (*sendLog) LookedUp(string)       {}
func (l *sendLog) Called(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, op)
}

func (l *sendLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// sent is the sends in their order, without the lookups.
func (l *sendLog) sent() []string {
	return slices.DeleteFunc(l.all(), func(op string) bool { return strings.HasSuffix(op, "_status") })
}

func (l *sendLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = nil
}

func (l *sendLog) last() string {
	all := l.all()
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

// TestATransitionThatMeetsAnotherDecidesAgain: a cancel whose statement
// began while another transition of its request was committing (one that
// queues an event and leaves the request accepted) waits for the request's
// row, finds it still accepted, and takes the position the other's event
// took: the unique key refuses it, nothing of it commits, and the one-phase
// path decides again and queues its event after the other's.
func TestATransitionThatMeetsAnotherDecidesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newReopenEnv(t)
	r := e.request
	e.do(t, "demo-requests.create", "create", idempotency.OnePhase, e.store.CreateDemoRequest(r))
	if n, err := e.dispatcher.Once(ctx); err != nil || n != 1 {
		t.Fatalf("the first dispatch: %d, %v", n, err)
	}

	// The other transition, committing: it holds the request's row and
	// has queued its event.
	tx := e.db.MustBeginTx(ctx, nil)
	defer tx.Rollback()
	tx.MustExec(`UPDATE demo_requests SET note = 'noted' WHERE id = $1`, r.ID)
	tx.MustExec(`INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
		VALUES ($1, $2, 'note', 1, 2, now(), now(), now())`, r.ID, r.Actor)

	done := make(chan error, 1)
	go func() {
		_, err := e.runner.Do(ctx, idempotency.Request{Scope: idempotency.Scope{Actor: r.Actor, Operation: "demo-requests.cancel", Key: "cancel-2"},
			Fingerprint: "cancel-2", Path: idempotency.OnePhase},
			func(context.Context, time.Time) (idempotency.Answer, error) {
				return idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte("{}"), ResultID: r.ID},
					Effect: e.store.CancelDemoRequest(cancelledNow(r))}, nil
			})
		done <- err
	}()
	// The cancel's statement starts, and waits for the request's row.
	if !testenv.Eventually(10*time.Second, func() bool {
		return testenv.Count(t, e.db, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	}) {
		select {
		case err := <-done:
			t.Fatalf("the cancel never waited for the reopen's lock: it ended with %v", err)
		default:
			t.Fatal("the cancel never waited for the reopen's lock")
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the cancel: %v; want it decided again and applied", err)
	}
	var kinds []string
	if err := e.db.Select(&kinds, `SELECT kind FROM outbox WHERE request_id = $1 ORDER BY position`, r.ID); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kinds, []string{"submit", "note", "cancel"}) {
		t.Fatalf("events by position: %v, want the submission, the other's event, then the cancel", kinds)
	}
}
