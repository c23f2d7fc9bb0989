package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDeliveryRoutes: the delivery of a create is pending until a
// dispatcher hands it over; the routes show it to its owner only; an unknown
// delivery is reconciled to submitted by asking the desk, which holds one
// submission throughout; the create's replay is unchanged by all this.
func TestDeliveryRoutes(t *testing.T) {
	t.Parallel()
	desk := testenv.StartDeskDouble(t)
	e := testenv.New(t, testenv.WithDesk(desk.URL))
	created := e.Create("key-d1", body1)
	id := created.Request(t).ID
	route := "/v1/demo-requests/" + id + "/delivery"
	get := func(token string) (testenv.Reply, delivery.Status) {
		t.Helper()
		r := e.Must(testenv.Req{Method: http.MethodGet, Path: route, Token: token})
		var st delivery.Status
		if r.Status == http.StatusOK {
			if err := json.Unmarshal(r.Body, &st); err != nil {
				t.Fatal(err)
			}
		}
		return r, st
	}

	if r, st := get(testenv.TokenAlice); r.Status != http.StatusOK || st.State != delivery.Pending || st.Attempts != 0 ||
		st.ProviderKey != "demo-request:"+id || st.NextAttemptAt == nil {
		t.Fatalf("GET delivery before any dispatch: %d %s", r.Status, r.Body)
	}
	if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + id, Token: testenv.TokenAlice}); !strings.Contains(string(r.Body), `"delivery":"pending"`) {
		t.Fatalf("GET demo request: %s, want its delivery pending", r.Body)
	}
	for _, rq := range []testenv.Req{
		{Method: http.MethodGet, Path: route, Token: testenv.TokenBob},
		{Method: http.MethodPost, Path: route + "/reconcile", Token: testenv.TokenBob},
		{Method: http.MethodGet, Path: "/v1/demo-requests/not-a-uuid/delivery", Token: testenv.TokenAlice},
	} {
		if r := e.Must(rq); r.Status != http.StatusNotFound || r.Problem(t) != "not_found" {
			t.Fatalf("%s %s as another actor or for no request: %d %s, want 404", rq.Method, rq.Path, r.Status, r.Body)
		}
	}

	// The desk accepts and loses its answer, then fails every call: the
	// two attempts run out and the delivery is unknown.
	for _, f := range []testenv.DeskFaults{{DropResponses: 1}, {FailNext: 10}} {
		desk.Faults(t, f)
		if _, err := e.Dispatcher.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r, st := get(testenv.TokenAlice); st.State == delivery.Pending && st.Attempts == 1 {
			if _, err := e.DB.Exec(`UPDATE outbox SET next_attempt_at = now()`); err != nil { // due now, not after the backoff
				t.Fatal(err)
			}
		} else if st.State != delivery.Unknown {
			t.Fatalf("GET delivery: %s", r.Body)
		}
	}
	if r, st := get(testenv.TokenAlice); st.State != delivery.Unknown || st.Attempts != 2 || st.LastError == nil {
		t.Fatalf("GET delivery after the attempts ran out: %s, want unknown", r.Body)
	}
	if r := e.Must(testenv.Req{Method: http.MethodPost, Path: route + "/reconcile", Token: testenv.TokenAlice}); r.Status != http.StatusServiceUnavailable ||
		r.Problem(t) != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("reconcile while the desk fails: %d %s, want 503 with Retry-After", r.Status, r.Body)
	}
	desk.Faults(t, testenv.DeskFaults{})
	for range 2 {
		r := e.Must(testenv.Req{Method: http.MethodPost, Path: route + "/reconcile", Token: testenv.TokenAlice})
		var st delivery.Status
		json.Unmarshal(r.Body, &st)
		if r.Status != http.StatusOK || st.State != delivery.Submitted || st.ProviderReference == nil {
			t.Fatalf("reconcile: %d %s, want submitted with the desk's reference", r.Status, r.Body)
		}
	}
	if n := desk.Submissions(t); n != 1 {
		t.Fatalf("the desk holds %d submissions, want 1", n)
	}
	if again := e.Create("key-d1", body1); again.Status != created.Status || string(again.Body) != string(created.Body) {
		t.Fatalf("the replay changed: %d %s, want %d %s", again.Status, again.Body, created.Status, created.Body)
	}
	metrics := string(e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"}).Body)
	for _, want := range []string{
		"demo_api_outbox_backlog 0",
		`demo_api_outbox_marks_total{state="unknown"} 1`,
		`demo_api_outbox_status_lookups_total{answer="unclear"} 1`,
		`demo_api_outbox_provider_calls_total{call="submit"} 1`,
		"demo_api_outbox_attempts_per_delivery_count 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestReconcileWithoutADesk: a server with no desk configured says so.
func TestReconcileWithoutADesk(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	id := e.Create("key-d2", body1).Request(t).ID
	if _, err := e.DB.Exec(`UPDATE outbox SET state = 'unknown', next_attempt_at = NULL`); err != nil {
		t.Fatal(err)
	}
	r := e.Must(testenv.Req{Method: http.MethodPost, Path: "/v1/demo-requests/" + id + "/delivery/reconcile", Token: testenv.TokenAlice})
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "PROVIDER_URL") {
		t.Fatalf("reconcile without a desk: %d %s, want 503 naming PROVIDER_URL", r.Status, r.Body)
	}
}

// TestDeliveryRouteShowsTheCancel: a request cancelled before any dispatch
// shows its delivery withdrawn, and the desk never hears of it; one
// cancelled after its hand-over shows the cancel at the desk, pending and
// then submitted. The cancel's replay is the same 200 either way.
func TestDeliveryRouteShowsTheCancel(t *testing.T) {
	t.Parallel()
	desk := testenv.StartDeskDouble(t)
	e := testenv.New(t, testenv.WithDesk(desk.URL))
	get := func(id string) (testenv.Reply, delivery.Status) {
		t.Helper()
		r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + id + "/delivery", Token: testenv.TokenAlice})
		var st delivery.Status
		if err := json.Unmarshal(r.Body, &st); err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET delivery: %d %s", r.Status, r.Body)
		}
		return r, st
	}
	cancel := func(id, key string) testenv.Reply {
		t.Helper()
		first := e.Must(testenv.Req{Path: "/v1/demo-requests/" + id + "/cancel", Token: testenv.TokenAlice, Keys: []string{key}})
		again := e.Must(testenv.Req{Path: "/v1/demo-requests/" + id + "/cancel", Token: testenv.TokenAlice, Keys: []string{key}})
		if first.Status != http.StatusOK || again.Status != http.StatusOK || string(again.Body) != string(first.Body) ||
			again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("cancel and its replay: %d %s, %d %s; want the same 200", first.Status, first.Body, again.Status, again.Body)
		}
		return first
	}

	early := e.Create("key-e1", body1).Request(t).ID
	cancel(early, "key-e1-cancel")
	if r, st := get(early); st.State != delivery.Withdrawn || st.Cancel != nil || st.NextAttemptAt != nil {
		t.Fatalf("delivery of a request cancelled before any dispatch: %s, want withdrawn, no cancel", r.Body)
	}
	if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + early, Token: testenv.TokenAlice}); !strings.Contains(string(r.Body), `"delivery":"withdrawn"`) {
		t.Fatalf("GET demo request: %s, want its delivery withdrawn", r.Body)
	}

	late := e.Create("key-e2", body1).Request(t).ID
	if _, err := e.Dispatcher.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel(late, "key-e2-cancel")
	if r, st := get(late); st.State != delivery.Submitted || st.Cancel == nil || st.Cancel.State != delivery.Pending ||
		st.Cancel.ProviderKey != "demo-request:"+late+":cancel" {
		t.Fatalf("delivery of a request cancelled after its hand-over: %s, want submitted with a pending cancel", r.Body)
	}
	if _, err := e.Dispatcher.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, st := get(late); st.Cancel == nil || st.Cancel.State != delivery.Submitted || st.Cancel.ProviderReference == nil {
		t.Fatalf("delivery after the cancel's dispatch: %s, want the cancel submitted with the desk's reference", r.Body)
	}
	if n, c := desk.Submissions(t), desk.AllCancels(t); n != 1 || c != 1 {
		t.Fatalf("the desk holds %d submissions and %d cancels, want 1 and 1 (none of the early request)", n, c)
	}
}
