package expedite_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// body1 is the body of a create.
const body1 = `{"topic":"topic-billing","note":"note-call me"}`

// withExpedite serves the expedite against desk, with its rule against a
// cancel, as the full demo's serve does.
func withExpedite(desk *desktest.Desk) testenv.Option { return withExpediteWrites(desk, nil) }

// withExpediteWrites is withExpedite with the expedite's writes made by
// wrap from the store's (nil: the store's).
func withExpediteWrites(desk *desktest.Desk, wrap func(expedite.ExpediteWrites) expedite.ExpediteWrites) testenv.Option {
	return func(d *httpapi.Deps, s *postgres.Store) {
		store := expedite.NewStore(s)
		var writes expedite.ExpediteWrites = store
		if wrap != nil {
			writes = wrap(store)
		}
		svc := &demo.Service{Store: store, RefusedTopics: d.Demo.(*demo.Service).RefusedTopics}
		d.Demo = expedite.Service{Service: svc, Expedites: store}
		d.Routes = func(srv *httpapi.Server) ([]httpapi.Route, error) {
			return expedite.Routes(srv, *d, svc, writes, desk.Client, store)
		}
	}
}

// expediteEnv is a server with the expedite, its desk, and a demo request
// of alice's to expedite.
type expediteEnv struct {
	*testenv.Env
	desk  *desktest.Desk
	clock *testenv.Clock
	id    string
}

func newExpediteEnv(t *testing.T, opts ...testenv.Option) *expediteEnv {
	return newExpediteEnvWrites(t, nil, opts...)
}

// newExpediteEnvWrites is newExpediteEnv with the expedite's writes made by
// wrap (withExpediteWrites).
func newExpediteEnvWrites(t *testing.T, wrap func(expedite.ExpediteWrites) expedite.ExpediteWrites, opts ...testenv.Option) *expediteEnv {
	t.Helper()
	desk := desktest.StartDesk(t, nil)
	clock := testenv.NewClock()
	e := testenv.New(t, append([]testenv.Option{withExpediteWrites(desk, wrap), testenv.WithClock(clock), testenv.WithWorkshop()}, opts...)...)
	id := e.Create("key-x0", body1).Request(t).ID
	return &expediteEnv{Env: e, desk: desk, clock: clock, id: id}
}

func (x *expediteEnv) expedite(key string, attempt int, header map[string]string) testenv.Reply {
	x.T.Helper()
	h := map[string]string{}
	if attempt > 0 { // 0: no X-Client-Attempt
		h["X-Client-Attempt"] = strconv.Itoa(attempt)
	}
	for k, v := range header {
		h[k] = v
	}
	r, err := x.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests/" + x.id + "/expedite", Token: testenv.TokenAlice, Keys: []string{key}, Header: h})
	if err != nil {
		return testenv.Reply{} // a dropped connection: Status 0
	}
	return r
}

// settle retries key until it gets an answer other than 409 (the run parked
// or held), moving the store's clock past each lease, and returns it.
func (x *expediteEnv) settle(key string, attempt int) testenv.Reply {
	x.T.Helper()
	for i := 0; i < 20; i++ {
		r := x.expedite(key, attempt+i, nil)
		if r.Status != http.StatusConflict {
			return r
		}
		x.clock.Advance(testenv.Lease)
	}
	x.T.Fatalf("expedite %s never settled", key)
	return testenv.Reply{}
}

// completer is the Runner the completer of serve and dispatch runs, on the
// env's store and desk.
func (x *expediteEnv) completer() (*steps.Runner, []*steps.Steps) {
	x.T.Helper()
	store := expedite.NewStore(x.Store)
	r, err := steps.NewRunner(idempotency.Config{TTL: testenv.TTL, Lease: testenv.Lease}, store)
	if err != nil {
		x.T.Fatal(err)
	}
	return r, []*steps.Steps{expedite.Steps(&demo.Service{Store: store}, store, x.desk.Client)}
}

// checkDesk fails the test unless the desk holds, for the request, exactly
// the slots, charges and releases given, and the calls made to it.
func (x *expediteEnv) checkDesk(slots, charges, releases int, calls map[string]int) {
	x.T.Helper()
	for what, want := range map[string]int{
		`SELECT count(*) FROM slots WHERE request_id = $1`:                                           slots,
		`SELECT count(*) FROM charges WHERE request_id = $1`:                                         charges,
		`SELECT count(*) FROM releases r JOIN slots s ON s.key = r.slot_key WHERE s.request_id = $1`: releases,
	} {
		if got := testenv.Count(x.T, x.desk.DB, what, x.id); got != want {
			x.T.Errorf("%s: %d, want %d", what, got, want)
		}
	}
	for call, want := range calls {
		if got := x.desk.Calls(call); got != want {
			x.T.Errorf("desk calls %s: %d, want %d (all: %v)", call, got, want, x.desk.AllCalls())
		}
	}
}

// expediteOf decodes r as an expedite.
func expediteOf(t testing.TB, r testenv.Reply) expedite.Expedite {
	t.Helper()
	var e expedite.Expedite
	if err := json.Unmarshal(r.Body, &e); err != nil || e.RequestID == "" {
		t.Fatalf("body %s is not an expedite: %v", r.Body, err)
	}
	return e
}

// outcome is the outcome route's view of an expedite's key.
func (x *expediteEnv) outcome(key string) (state, point, runState string, status int) {
	x.T.Helper()
	r := x.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/" + key + "?operation=" + expedite.ExpediteOperation, Token: testenv.TokenAlice})
	var o struct {
		State  string
		Status int
		Run    *struct{ RecoveryPoint, State string }
	}
	if err := json.Unmarshal(r.Body, &o); err != nil || r.Status != http.StatusOK || o.Run == nil {
		x.T.Fatalf("outcome of %s: %d %s", key, r.Status, r.Body)
	}
	return o.State, o.Run.RecoveryPoint, o.Run.State, o.Status
}

// TestExpedite: the steps run once each, one call per step; the answer is
// stored and replayed byte for byte; the order is confirmed with the
// desk's references, and the desk holds one slot, charged, and one charge.
func TestExpedite(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	first := x.expedite("key-x1", 1, nil)
	if first.Status != http.StatusCreated {
		t.Fatalf("expedite: %d %s\n%s", first.Status, first.Body, x.Logs.String())
	}
	e := expediteOf(t, first)
	if e.State != expedite.ExpediteConfirmed || e.SlotReference == "" || e.ChargeReference == "" || e.Amount != expedite.ExpediteAmount {
		t.Fatalf("expedite answer %s", first.Body)
	}
	for _, attempt := range []int{2, 0} { // read first as a retry, and through the claim
		again := x.expedite("key-x1", attempt, nil)
		if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay (attempt %d): %d %s", attempt, again.Status, again.Body)
		}
	}
	got := x.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + x.id + "/expedite", Token: testenv.TokenAlice})
	if got.Status != http.StatusOK || expediteOf(t, got).State != expedite.ExpediteConfirmed {
		t.Fatalf("GET expedite: %d %s", got.Status, got.Body)
	}
	if state, point, run, status := x.outcome("key-x1"); state != "completed" || point != "charged" || run != "done" || status != 201 {
		t.Fatalf("outcome: %s %s %s %d", state, point, run, status)
	}
	// Another key for the same request is refused, and the refusal is
	// stored: the desk is not called again.
	other := x.expedite("key-x2", 1, nil)
	if other.Status != http.StatusUnprocessableEntity || other.Problem(t) != "request_not_expeditable" {
		t.Fatalf("a second expedite: %d %s", other.Status, other.Body)
	}
	x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1,
		"GET /v1/slots/{key}": 0, "GET /v1/charges/{key}": 0})
}

// TestExpediteDroppedAnswer: at each external step the desk accepts and
// its answer is lost. The run parks at its recovery point; the retry that
// takes it over asks the desk first, finds the step done, and does not send
// it again.
func TestExpediteDroppedAnswer(t *testing.T) {
	testenv.Long(t, "fault injection: the desk's answer lost at each step")
	t.Parallel()
	for _, resource := range []string{"slots", "charges"} {
		t.Run(resource, func(t *testing.T) {
			t.Parallel()
			x := newExpediteEnv(t)
			x.desk.Faults(t, provider.Faults{DropResponses: 1, Only: []string{resource}})
			if r := x.expedite("key-x1", 1, nil); r.Status != http.StatusConflict || r.Problem(t) != "operation_in_progress" {
				t.Fatalf("expedite with the %s answer lost: %d %s, want 409 (parked)", resource, r.Status, r.Body)
			}
			if r := x.settle("key-x1", 2); r.Status != http.StatusCreated {
				t.Fatalf("the retry: %d %s", r.Status, r.Body)
			}
			x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1,
				"GET /v1/" + resource + "/{key}": 1})
		})
	}
}

// TestExpediteRefusedCharge: the desk refuses the charge. The slot is
// released once, under its own key; the 422 is stored and replayed, and the
// order is refused.
func TestExpediteRefusedCharge(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	x.desk.Faults(t, provider.Faults{Refuse: true, Only: []string{"charges"}})
	first := x.expedite("key-x1", 1, nil)
	if first.Status != http.StatusUnprocessableEntity || first.Problem(t) != "expedite_refused" {
		t.Fatalf("expedite with the charge refused: %d %s", first.Status, first.Body)
	}
	x.desk.Faults(t, provider.Faults{})
	again := x.expedite("key-x1", 2, nil)
	if again.Status != first.Status || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of the refusal: %d %s", again.Status, again.Body)
	}
	if n := x.Count(`SELECT count(*) FROM expedites WHERE request_id = $1 AND state = 'refused'`, x.id); n != 1 {
		t.Fatalf("refused orders: %d", n)
	}
	if _, point, run, _ := x.outcome("key-x1"); point != "slot_reserved" || run != "done" {
		t.Fatalf("outcome: point %s, run %s", point, run)
	}
	x.checkDesk(1, 0, 1, map[string]int{"POST /v1/slots": 1, "POST /v1/slots/{key}/release": 1})
}

// TestExpediteStopAfterEachStep: a runner that dies after each step (the
// workshop knob) leaves the run at that recovery point; once by a retry,
// once by the completer, the run continues from there, and the desk holds
// one slot and one charge.
func TestExpediteStopAfterEachStep(t *testing.T) {
	testenv.Long(t, "fault injection: a runner that dies after each step")
	t.Parallel()
	for _, step := range []string{"ordered", "slot_reserved", "charged"} {
		for _, by := range []string{"retry", "completer"} {
			t.Run(step+"/"+by, func(t *testing.T) {
				t.Parallel()
				x := newExpediteEnv(t)
				if r := x.expedite("key-x1", 1, map[string]string{"Workshop-Stop-After": step}); r.Status != 0 {
					t.Fatalf("stopped after %s: %d %s, want no answer", step, r.Status, r.Body)
				}
				if state, point, run, _ := x.outcome("key-x1"); state != "in_progress" || point != step || run != "running" {
					t.Fatalf("outcome after the stop: %s %s %s", state, point, run)
				}
				var final testenv.Reply
				if by == "retry" {
					final = x.settle("key-x1", 2)
				} else {
					r, ops := x.completer()
					if n, err := r.CompleteAbandoned(context.Background(), ops, 4); err != nil || n != 1 {
						t.Fatalf("completer: %d runs, %v", n, err)
					}
					if state, _, run, status := x.outcome("key-x1"); state != "completed" || run != "done" || status != 201 {
						t.Fatalf("outcome after the completer: %s %s %d", state, run, status)
					}
					final = x.expedite("key-x1", 2, nil)
				}
				if final.Status != http.StatusCreated || expediteOf(t, final).State != expedite.ExpediteConfirmed {
					t.Fatalf("the resumed answer: %d %s", final.Status, final.Body)
				}
				x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1})
			})
		}
	}
}

// TestExpediteStoppedRequestSentAgain: the stopped request sent again
// unchanged (as a browser does when a reused connection closes without an
// answer) finds the run past its stop: it runs nothing, takes no turn and
// stops there again, its lease ended; the retry without the knob resumes.
func TestExpediteStoppedRequestSentAgain(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	stop := map[string]string{"Workshop-Stop-After": "slot_reserved"}
	for i := range 2 {
		if r := x.expedite("key-x1", 1, stop); r.Status != 0 {
			t.Fatalf("the stopped request, sent %d times: %d %s, want no answer", i+1, r.Status, r.Body)
		}
	}
	r := x.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/key-x1?operation=" + expedite.ExpediteOperation, Token: testenv.TokenAlice})
	var o struct {
		State                 string
		LeaseRemainingSeconds *int
		Run                   struct {
			RecoveryPoint string
			Attempts      int
		}
	}
	if err := json.Unmarshal(r.Body, &o); err != nil || o.State != "in_progress" || o.Run.RecoveryPoint != "slot_reserved" ||
		o.Run.Attempts != 1 || o.LeaseRemainingSeconds == nil || *o.LeaseRemainingSeconds != 0 {
		t.Fatalf("outcome after the stopped request twice: %s (%v); want in progress at slot_reserved, one turn, the lease passed", r.Body, err)
	}
	x.checkDesk(1, 0, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 0})
	// No clock moved: the retry takes the key over at once.
	if got := x.expedite("key-x1", 2, nil); got.Status != http.StatusCreated || expediteOf(t, got).State != expedite.ExpediteConfirmed {
		t.Fatalf("the retry: %d %s, want 201 confirmed", got.Status, got.Body)
	}
	x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1})
}

// TestExpediteStaleRunnerFenced: a runner held inside its first step loses
// its lease to a retry, which runs the whole operation; the held runner's
// write is then refused by the fence, and nothing runs twice.
func TestExpediteStaleRunnerFenced(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	claimed, release := x.Hold()
	stale := make(chan testenv.Reply, 1)
	go func() { stale <- x.expedite("key-x1", 1, testenv.HoldHeader) }()
	<-claimed
	x.clock.Advance(testenv.Lease + time.Second)
	if r := x.expedite("key-x1", 2, nil); r.Status != http.StatusCreated {
		t.Fatalf("the retry that took over: %d %s", r.Status, r.Body)
	}
	close(release)
	if r := <-stale; r.Status != http.StatusConflict || r.Problem(t) != "operation_in_progress" {
		t.Fatalf("the stale runner: %d %s, want 409 (fenced out)", r.Status, r.Body)
	}
	if n := x.Count(`SELECT count(*) FROM expedites WHERE request_id = $1 AND state = 'confirmed'`, x.id); n != 1 {
		t.Fatalf("confirmed orders: %d", n)
	}
	x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1})
}

// TestExpediteNeedsAttention: with the desk down, every turn parks the run;
// past its turns it needs attention, holds its key (409) and says so on the
// outcome route. An operator's resume, once the desk is back, lets the
// completer finish it.
func TestExpediteNeedsAttention(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	x.desk.Faults(t, provider.Faults{Down: true})
	if r := x.expedite("key-x1", 1, nil); r.Status != http.StatusConflict {
		t.Fatalf("expedite with the desk down: %d %s", r.Status, r.Body)
	}
	r, ops := x.completer()
	for i := 0; i < 10; i++ {
		x.clock.Advance(time.Minute) // past the longest park (30 s, jittered up to 45 s)
		if _, err := r.CompleteAbandoned(context.Background(), ops, 4); err != nil {
			t.Fatal(err)
		}
	}
	if state, point, run, _ := x.outcome("key-x1"); state != "in_progress" || point != "ordered" || run != "needs_attention" {
		t.Fatalf("outcome: state %s, point %s, run %s, want in_progress, ordered, needs_attention", state, point, run)
	}
	if o := x.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/key-x1?operation=" + expedite.ExpediteOperation, Token: testenv.TokenAlice}); strings.Contains(string(o.Body), "leaseRemainingSeconds") {
		t.Fatalf("the outcome of a run that needs attention shows a lease: %s", o.Body)
	}
	x.clock.Advance(testenv.Lease)
	// Whatever the retry (one that reads the key first, a first attempt's
	// claim, one that would wait), the answer says what an operator does,
	// and promises no time: only the operator moves the run.
	for _, retry := range []struct {
		attempt int
		header  map[string]string
	}{{2, nil}, {1, nil}, {0, map[string]string{"Prefer": "wait=5"}}} {
		start := time.Now()
		r := x.expedite("key-x1", retry.attempt, retry.header)
		var p struct{ Detail string }
		json.Unmarshal(r.Body, &p)
		if r.Status != http.StatusConflict || r.Problem(t) != "operation_in_progress" || r.Header.Get("Retry-After") != "" ||
			!strings.Contains(p.Detail, "needs attention") ||
			!strings.Contains(p.Detail, "`demo-api resume-run --actor alice --operation demo-requests.expedite --key key-x1`") {
			t.Fatalf("a retry (attempt %d, %v) of a run that needs attention: %d Retry-After %q %s; want 409 with no Retry-After, "+
				"saying how an operator resumes it", retry.attempt, retry.header, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Fatalf("a retry with %v waited %v for a run no one runs", retry.header, waited)
		}
	}
	if n, err := expedite.NewStore(x.Store).RunsNeedingAttention(context.Background()); err != nil || n != 1 {
		t.Fatalf("runs needing attention: %d, %v", n, err)
	}
	// Its key is held beyond any key's TTL (steps.NeedsAttentionLease).
	if n := x.Count(`SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'
		AND lease_until > now() + $1::bigint * interval '1 microsecond'`, testenv.TTL.Microseconds()); n != 1 {
		t.Fatalf("keys needing attention: %d", n)
	}
	x.desk.Faults(t, provider.Faults{})
	if ok, err := expedite.NewStore(x.Store).ResumeRun(context.Background(), idempotency.Scope{Actor: "alice", Operation: expedite.ExpediteOperation, Key: "key-x1"}); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	if n, err := r.CompleteAbandoned(context.Background(), ops, 4); err != nil || n != 1 {
		t.Fatalf("completer after the resume: %d, %v", n, err)
	}
	if final := x.expedite("key-x1", 3, nil); final.Status != http.StatusCreated {
		t.Fatalf("after the resume: %d %s", final.Status, final.Body)
	}
	x.checkDesk(1, 1, 0, nil)
}

// TestExpediteRunLongerThanTheTTL: a run that ends after its key's TTL
// (Workshop-TTL: 5s, counted from the claim) keeps its key until it ends,
// and its answer is replayed for the TTL from then: whether a retry or the
// completer ends it, a retry afterwards gets the confirmed order, not a new
// intent refused as already expedited.
func TestExpediteRunLongerThanTheTTL(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"retry", "completer"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			x := newExpediteEnv(t)
			first := map[string]string{"Workshop-Stop-After": "ordered", "Workshop-TTL": "5s"}
			if r := x.expedite("key-x1", 1, first); r.Status != 0 {
				t.Fatalf("stopped after ordered: %d %s, want no answer", r.Status, r.Body)
			}
			x.clock.Advance(testenv.Lease + time.Second) // past the TTL and the lease
			var final testenv.Reply
			if by == "retry" {
				final = x.settle("key-x1", 2)
				if logs := x.Logs.String(); strings.Contains(logs, `"outcome":"expired_taken_over"`) {
					t.Fatal("the retry took the run's key over as expired: a new intent while the run was unfinished")
				}
			} else {
				r, ops := x.completer()
				if n, err := r.CompleteAbandoned(context.Background(), ops, 4); err != nil || n != 1 {
					t.Fatalf("completer: %d runs, %v", n, err)
				}
				final = x.expedite("key-x1", 2, nil)
			}
			if final.Status != http.StatusCreated || expediteOf(t, final).State != expedite.ExpediteConfirmed {
				t.Fatalf("the answer after the run ended past the TTL: %d %s, want 201 confirmed", final.Status, final.Body)
			}
			x.clock.Advance(4 * time.Second)
			if r := x.expedite("key-x1", 9, nil); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("a retry 4 s after the answer: %d %s, want the replay", r.Status, r.Body)
			}
			x.checkDesk(1, 1, 0, map[string]int{"POST /v1/slots": 1, "POST /v1/charges": 1})
		})
	}
}

// orderHooked is the store with a hook that runs when an expedite's first
// step has read the request and decided to order, before its order is
// written.
type orderHooked struct {
	expedite.ExpediteWrites
	hook func()
}

func (o orderHooked) OrderExpedite(actor string, e expedite.Expedite) idempotency.Effect {
	o.hook()
	return o.ExpediteWrites.OrderExpedite(actor, e)
}

// TestFirstExpediteLosingToACancel: a cancel that commits between the
// expedite's read of the request and its order's write wins (the rule of
// docs/steps.md); the expedite learns it at its write and answers the
// refusal at once, 422 request_not_expeditable, not a 409 that the
// completer turns into the 422 later. Nothing reaches the desk.
func TestFirstExpediteLosingToACancel(t *testing.T) {
	t.Parallel()
	var x *expediteEnv
	var once sync.Once
	cancelled := make(chan testenv.Reply, 1)
	x = newExpediteEnvWrites(t, func(w expedite.ExpediteWrites) expedite.ExpediteWrites {
		return orderHooked{ExpediteWrites: w, hook: func() {
			once.Do(func() {
				cancelled <- x.Must(testenv.Req{Path: "/v1/demo-requests/" + x.id + "/cancel", Token: testenv.TokenAlice, Keys: []string{"key-cancel"}})
			})
		}}
	})
	r := x.expedite("key-x1", 1, nil)
	if c := <-cancelled; c.Status != http.StatusOK {
		t.Fatalf("the cancel: %d %s, want 200", c.Status, c.Body)
	}
	if r.Status != http.StatusUnprocessableEntity || r.Problem(t) != "request_not_expeditable" {
		t.Fatalf("the expedite that lost to the cancel: %d %s, want 422 request_not_expeditable at once", r.Status, r.Body)
	}
	if again := x.expedite("key-x1", 2, nil); again.Status != http.StatusUnprocessableEntity || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("its retry: %d %s, want the 422 replayed", again.Status, again.Body)
	}
	x.checkDesk(0, 0, 0, map[string]int{"POST /v1/slots": 0})
}
