package expedite_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// The rules between operations that touch one demo request (package demo):
// a cancel and an expedite never both win, and a cancelled request is never
// submitted to the desk after its cancel.

// TestCancelRefusedWhileExpediteUnfinished: the desk's slots are down, so
// the expedite parks at "ordered"; a cancel now is refused (stored 422
// request_being_expedited), and when the desk is back the completer
// finishes the expedite: the request is expedited, never cancelled and
// charged. A cancel of a request whose expedite is confirmed is refused
// for good (request_not_cancellable).
func TestCancelRefusedWhileExpediteUnfinished(t *testing.T) {
	t.Parallel()
	x := newExpediteEnv(t)
	x.desk.Faults(t, provider.Faults{Down: true, Only: []string{"slots"}})
	if r := x.expedite("key-x1", 1, nil); r.Status != http.StatusConflict {
		t.Fatalf("expedite with the slots down: %d %s, want 409 (parked)", r.Status, r.Body)
	}
	cancel := func(key string, attempt int) testenv.Reply {
		return x.Must(testenv.Req{Path: "/v1/demo-requests/" + x.id + "/cancel", Token: testenv.TokenAlice, Keys: []string{key},
			Header: map[string]string{"X-Client-Attempt": strconv.Itoa(attempt)}})
	}
	first := cancel("c-1", 1)
	if first.Status != http.StatusUnprocessableEntity || first.Problem(t) != expedite.BeingExpedited {
		t.Fatalf("cancel while the expedite is unfinished: %d %s, want 422 %s", first.Status, first.Body, expedite.BeingExpedited)
	}
	if again := cancel("c-1", 2); again.Status != first.Status || string(again.Body) != string(first.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the cancel's retry: %d %s, want the stored refusal replayed", again.Status, again.Body)
	}
	x.desk.Faults(t, provider.Faults{})
	r, ops := x.completer()
	x.clock.Advance(time.Minute)
	if n, err := r.CompleteAbandoned(context.Background(), ops, 4); err != nil || n != 1 {
		t.Fatalf("completer: %d runs, %v", n, err)
	}
	if final := x.expedite("key-x1", 2, nil); final.Status != http.StatusCreated || expediteOf(t, final).State != expedite.ExpediteConfirmed {
		t.Fatalf("the expedite after the desk came back: %d %s", final.Status, final.Body)
	}
	if after := cancel("c-2", 1); after.Status != http.StatusUnprocessableEntity || after.Problem(t) != apperr.NotCancellable {
		t.Fatalf("cancel of an expedited request: %d %s, want 422 %s", after.Status, after.Body, apperr.NotCancellable)
	}
	if n := x.Count(`SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'accepted'`, x.id); n != 1 {
		t.Fatal("the expedited request is not accepted")
	}
	x.checkDesk(1, 1, 0, nil)
}

// TestCancelAndExpediteRace: for each of a set of requests, a cancel and an
// expedite (under their own keys, retried by their clients) start at the
// same moment, while the desk answers slowly, the completer takes parked
// and abandoned runs, and the dispatcher hands the requests (and their
// cancels) to the desk. Exactly one of the two wins each request, and in
// the end no cancelled request holds a slot, a charge or a live submission
// at the desk.
func TestCancelAndExpediteRace(t *testing.T) {
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	clock := testenv.NewClock()
	x := testenv.New(t, withExpedite(desk), testenv.WithClock(clock), testenv.WithDesk(desk.URL))
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		ids[i] = x.Create("key-r"+strconv.Itoa(i), body1).Request(t).ID
	}
	desk.Faults(t, provider.Faults{Delay: "150ms", Only: []string{"slots", "charges", "submissions"}})

	ctx, stop := context.WithCancel(context.Background())
	var background sync.WaitGroup
	background.Go(func() { x.Dispatcher.Run(ctx) })
	xe := &expediteEnv{Env: x, desk: desk, clock: clock}
	completer, ops := xe.completer()
	background.Go(func() {
		for ctx.Err() == nil {
			clock.Advance(time.Second) // parked runs come due; the dispatcher's backoffs pass
			if _, err := completer.CompleteAbandoned(ctx, ops, 4); err != nil && ctx.Err() == nil {
				t.Errorf("completer: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	// send retries one intent until it gets an answer that is not to be
	// retried (409, 503), as a client does.
	send := func(path, key string) testenv.Reply {
		for attempt := 1; attempt <= 200; attempt++ {
			r, err := x.Do(context.Background(), testenv.Req{Path: path, Token: testenv.TokenAlice, Keys: []string{key},
				Header: map[string]string{"X-Client-Attempt": strconv.Itoa(attempt)}})
			if err == nil && r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable {
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("%s %s never settled", path, key)
		return testenv.Reply{}
	}
	type pair struct{ cancel, expedite testenv.Reply }
	results := make([]pair, n)
	start := make(chan struct{})
	var clients sync.WaitGroup
	for i, id := range ids {
		clients.Go(func() {
			<-start
			results[i].cancel = send("/v1/demo-requests/"+id+"/cancel", "c-"+strconv.Itoa(i))
		})
		clients.Go(func() {
			<-start
			results[i].expedite = send("/v1/demo-requests/"+id+"/expedite", "x-"+strconv.Itoa(i))
		})
	}
	close(start)
	clients.Wait()
	desk.Faults(t, provider.Faults{})
	// The race is over; the background goes on until every run is settled
	// and every delivery and cancel reached the desk.
	if !testenv.Eventually(20*time.Second, func() bool {
		return x.Count(`SELECT count(*) FROM runs WHERE state IN ('running', 'compensating')`) == 0 &&
			x.Count(`SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	}) {
		t.Error("runs or deliveries still unsettled")
	}
	stop()
	background.Wait()

	// The outcomes the rule allows (docs/steps.md, "A cancel and an
	// expedite"): the cancel commits first and the expedite is refused at
	// its first step; or the expedite's order commits first, and the cancel
	// is refused while the run is unfinished or, once it is confirmed, for
	// good. Any other pair, and a pair the rows do not bear out, is a break.
	cancelled, expedited := 0, 0
	for i, p := range results {
		var state string
		if err := x.DB.GetContext(context.Background(), &state, `SELECT state FROM demo_requests WHERE id = $1`, ids[i]); err != nil {
			t.Fatal(err)
		}
		switch {
		case p.cancel.Status == http.StatusOK && p.expedite.Status == http.StatusUnprocessableEntity &&
			p.expedite.Problem(t) == expedite.NotExpeditable && state == demo.StateCancelled:
			cancelled++
		case p.expedite.Status == http.StatusCreated && expediteOf(t, p.expedite).State == expedite.ExpediteConfirmed &&
			p.cancel.Status == http.StatusUnprocessableEntity &&
			(p.cancel.Problem(t) == expedite.BeingExpedited || p.cancel.Problem(t) == apperr.NotCancellable) &&
			state != demo.StateCancelled:
			expedited++
		default:
			t.Errorf("request %d (%s): cancel %d %s, expedite %d %s: want exactly one to win", i, state,
				p.cancel.Status, p.cancel.Body, p.expedite.Status, p.expedite.Body)
		}
	}
	t.Logf("%d requests: %d cancelled, %d expedited", n, cancelled, expedited)

	var gone []string
	if err := x.DB.SelectContext(context.Background(), &gone, `SELECT id::text FROM demo_requests WHERE state = 'cancelled'`); err != nil {
		t.Fatal(err)
	}
	if n := x.Count(`SELECT count(*) FROM demo_requests d JOIN expedites e ON e.request_id = d.id
	                 WHERE d.state = 'cancelled' AND e.state <> 'refused'`); n != 0 {
		t.Errorf("%d cancelled requests with an expedite ordered or confirmed", n)
	}
	for what, q := range map[string]string{
		"charges kept": `SELECT count(*) FROM charges c WHERE c.request_id = ANY($1)
		                 AND NOT EXISTS (SELECT 1 FROM refunds f WHERE f.charge_key = c.key)`,
		"slots held": `SELECT count(*) FROM slots s WHERE s.request_id = ANY($1)
		               AND NOT EXISTS (SELECT 1 FROM releases r WHERE r.slot_key = s.key)`,
		"live submissions": `SELECT count(*) FROM submissions s WHERE s.request_id = ANY($1)
		                     AND NOT EXISTS (SELECT 1 FROM cancels c WHERE c.submission_key = s.key)`,
	} {
		if got := testenv.Count(t, desk.DB, q, pq.Array(gone)); got != 0 {
			t.Errorf("%s at the desk for cancelled requests: %d, want 0", what, got)
		}
	}
}
