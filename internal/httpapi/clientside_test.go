package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestPreferWait: a retry that finds its key in progress waits for the
// owner's answer instead of a 409, as long as Prefer: wait allows.
func TestPreferWait(t *testing.T) {
	testenv.ForEachPath(t, func(t *testing.T, path idempotency.Path) {
		e := testenv.New(t, testenv.WithPath(path), testenv.WithWorkshop())
		claimed, release := e.Hold()
		first := make(chan testenv.Reply, 1)
		go func() {
			first <- e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-wait"}, Body: body1, Header: testenv.HoldHeader})
		}()
		<-claimed

		waited := make(chan testenv.Reply, 1)
		sent := time.Now()
		go func() {
			waited <- e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-wait"}, Body: body1,
				Header: map[string]string{"Prefer": "wait=5"}})
		}()
		time.Sleep(300 * time.Millisecond) // the retry is waiting now
		released := time.Now()
		testenv.CloseOnce(release)
		owner, r := <-first, <-waited
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("Preference-Applied") != "wait" ||
			string(r.Body) != string(owner.Body) {
			t.Fatalf("the waiting retry: %d %v %s, want the owner's answer replayed", r.Status, r.Header, r.Body)
		}
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the waiter answered %v after the owner finished", d)
		}
		t.Logf("%s: the waiter answered %v after it was sent", path, time.Since(sent).Round(time.Millisecond))
	})
}

// TestPreferWaitCapped: a wait shorter than the owner's work ends in the 409.
func TestPreferWaitCapped(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkshop())
	claimed, release := e.Hold()
	go e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-cap"}, Body: body1, Header: testenv.HoldHeader})
	<-claimed
	start := time.Now()
	r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-cap"}, Body: body1,
		Header: map[string]string{"Prefer": "wait=1"}})
	if r.Status != http.StatusConflict || r.Problem(t) != apperr.OperationInProgress || r.Header.Get("Preference-Applied") != "" {
		t.Fatalf("capped wait: %d %v %s, want 409", r.Status, r.Header, r.Body)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("the 409 came after %v, want about the 1 s asked for", d)
	}
	testenv.CloseOnce(release)
}

// TestManyWaitersFewConnections: 200 retries wait on one key; while they
// wait they hold almost none of the pool's connections.
func TestManyWaitersFewConnections(t *testing.T) {
	testenv.Long(t, "a load of 200 waiters on one key")
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkshop())
	testenv.WarmPool(t, e.DB, e.DB.Stats().MaxOpenConnections)
	claimed, release := e.Hold()
	go e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-many"}, Body: body1, Header: testenv.HoldHeader})
	<-claimed
	const n = 200
	var wg sync.WaitGroup
	replies := make([]testenv.Reply, n)
	for i := range n {
		wg.Go(func() {
			replies[i], _ = e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-many"}, Body: body1,
				Header: map[string]string{"Prefer": "wait=12"}})
		})
	}
	// Sample once every retry has arrived (its one-phase work ran, counted
	// by the env) and run its first statement (which takes a connection, as
	// any request does): then the pool falls quiet.
	if !testenv.Eventually(20*time.Second, func() bool { return e.Works.Load() >= n+1 && e.DB.Stats().InUse <= 1 }) {
		t.Fatalf("the retries never all arrived and waited: %d works, %d connections in use", e.Works.Load(), e.DB.Stats().InUse)
	}
	maxInUse, sum, samples := 0, 0, 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		n := e.DB.Stats().InUse
		maxInUse, sum, samples = max(maxInUse, n), sum+n, samples+1
	}
	mean := float64(sum) / float64(samples)
	testenv.CloseOnce(release)
	wg.Wait()
	waited := 0
	for _, r := range replies {
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a waiter got %d %v %s", r.Status, r.Header, r.Body)
		}
		if r.Header.Get("Preference-Applied") == "wait" {
			waited++
		}
	}
	if waited < n/2 {
		t.Fatalf("only %d of %d retries waited (the others arrived after the answer)", waited, n)
	}
	// A waiter holds no connection between its polls (a read every second
	// or so); the mean counts the polls in flight.
	if mean > 4 {
		t.Fatalf("%d waiters held %.1f connections on average while waiting (at most %d), want a handful", n, mean, maxInUse)
	}
	t.Logf("%d retries, %d waited: %.1f connections in use on average while they waited, at most %d", n, waited, mean, maxInUse)
}

// TestClientAttemptHeader: X-Client-Attempt is checked before the claim and
// logged.
func TestClientAttemptHeader(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, bad := range []string{"0", "-1", "x", "1.5", "1001"} {
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-att"}, Body: body1,
			Header: map[string]string{"X-Client-Attempt": bad}})
		if r.Status != http.StatusBadRequest || r.Problem(t) != apperr.InvalidHeader {
			t.Fatalf("X-Client-Attempt %q: %d %s", bad, r.Status, r.Body)
		}
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatal("a bad X-Client-Attempt stored its key")
	}
	e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-att"}, Body: body1, Header: map[string]string{"X-Client-Attempt": "2"}})
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(e.Logs.String(), `"client_attempt":2`) }) {
		t.Fatal("the attempt number was not logged")
	}
}

// TestProblemPages: every problem's type is a page the service serves, and
// the key's errors link to it.
func TestProblemPages(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Body: body1})
	if r.Problem(t) != apperr.KeyMissing || r.Header.Get("Link") != `</problems/idempotency_key_missing>; rel="describedby"` {
		t.Fatalf("missing key: %v %s", r.Header, r.Body)
	}
	page := e.Must(testenv.Req{Method: http.MethodGet, Path: "/problems/idempotency_key_missing"})
	if page.Status != http.StatusOK || !strings.Contains(string(page.Body), "Idempotency-Key header missing") {
		t.Fatalf("problem page: %d %s", page.Status, page.Body)
	}
	for _, code := range apperr.Codes() {
		if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/problems/" + code}); r.Status != http.StatusOK {
			t.Errorf("no page for code %s: %d", code, r.Status)
		}
	}
	if r := e.Must(testenv.Req{Method: http.MethodGet, Path: "/problems/nope"}); r.Status != http.StatusNotFound {
		t.Fatalf("unknown problem page: %d", r.Status)
	}
}

// TestDroppedResponseIsNotLoggedAs200: a response the workshop dropped is
// logged and counted as dropped, not as the 200 net/http never sent.
func TestDroppedResponseIsNotLoggedAs200(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkshop())
	if _, err := e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-drop"}, Body: body1,
		Header: map[string]string{"Workshop-Drop-Response": "true"}}); err == nil {
		t.Fatal("the dropped response arrived")
	}
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(e.Logs.String(), `"status":0,"duration"`) }) ||
		!strings.Contains(e.Logs.String(), `"response_dropped":true`) {
		t.Fatalf("the dropped response was not logged as dropped:\n%s", e.Logs.String())
	}
	scrape := string(e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"}).Body)
	if !strings.Contains(scrape, `demo_api_http_request_duration_seconds_count{route="/v1/demo-requests",status="dropped"} 1`) {
		t.Fatal("the dropped response was not counted as dropped")
	}
}

// TestPreferWaitClientGone: a retry that waits for the owner's answer and
// whose client hangs up meanwhile is logged and counted as client_gone, as
// on the other paths, not as a 409 no one read.
func TestPreferWaitClientGone(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkshop())
	claimed, release := e.Hold()
	defer testenv.CloseOnce(release)
	go e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-gone"}, Body: body1, Header: testenv.HoldHeader})
	<-claimed
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if r, err := e.Do(ctx, testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-gone"}, Body: body1,
		Header: map[string]string{"Prefer": "wait=5"}}); err == nil {
		t.Fatalf("the waiter whose client left got an answer: %d", r.Status)
	}
	var line string
	if !testenv.Eventually(5*time.Second, func() bool {
		for l := range strings.SplitSeq(e.Logs.String(), "\n") {
			if strings.Contains(l, `"route":"/v1/demo-requests"`) && strings.Contains(l, `"outcome":"in_progress"`) {
				line = l
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no request line for the waiter:\n%s", e.Logs.String())
	}
	if !strings.Contains(line, `"client_gone":true`) || strings.Contains(line, `"status":409`) {
		t.Fatalf("the waiter whose client left is logged as\n%s\nwant client_gone, not 409", line)
	}
}
