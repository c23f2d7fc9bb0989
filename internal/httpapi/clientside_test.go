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
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestPreferWait: a retry that finds its key in progress waits for the
// owner's answer instead of a 409, as long as Prefer: wait allows.
func TestPreferWait(t *testing.T) {
	forEachPath(t, func(t *testing.T, path idempotency.Path) {
		e := newEnv(t, withPath(path), withWorkshop())
		claimed, release := e.hold()
		first := make(chan reply, 1)
		go func() {
			first <- e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-wait"}, body: body1, header: holdHeader})
		}()
		<-claimed

		waited := make(chan reply, 1)
		sent := time.Now()
		go func() {
			waited <- e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-wait"}, body: body1,
				header: map[string]string{"Prefer": "wait=5"}})
		}()
		time.Sleep(300 * time.Millisecond) // the retry is waiting now
		released := time.Now()
		closeOnce(release)
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
	e := newEnv(t, withWorkshop())
	claimed, release := e.hold()
	go e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-cap"}, body: body1, header: holdHeader})
	<-claimed
	start := time.Now()
	r := e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-cap"}, body: body1,
		header: map[string]string{"Prefer": "wait=1"}})
	if r.Status != http.StatusConflict || r.problem(t) != apperr.OperationInProgress || r.Header.Get("Preference-Applied") != "" {
		t.Fatalf("capped wait: %d %v %s, want 409", r.Status, r.Header, r.Body)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("the 409 came after %v, want about the 1 s asked for", d)
	}
	closeOnce(release)
}

// TestManyWaitersFewConnections: 200 retries wait on one key; while they
// wait they hold almost none of the pool's connections.
func TestManyWaitersFewConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withWorkshop())
	claimed, release := e.hold()
	go e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-many"}, body: body1, header: holdHeader})
	<-claimed
	const n = 200
	var wg sync.WaitGroup
	replies := make([]reply, n)
	for i := range n {
		wg.Go(func() {
			replies[i], _ = e.do(context.Background(), req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-many"}, body: body1,
				header: map[string]string{"Prefer": "wait=12"}})
		})
	}
	// Sample once every retry has arrived (its one-phase work ran, counted
	// by the env) and run its first statement (which takes a connection, as
	// any request does): then the pool falls quiet.
	if !testkit.Eventually(20*time.Second, func() bool { return e.works.Load() >= n+1 && e.db.Stats().InUse <= 1 }) {
		t.Fatalf("the retries never all arrived and waited: %d works, %d connections in use", e.works.Load(), e.db.Stats().InUse)
	}
	maxInUse, sum, samples := 0, 0, 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		n := e.db.Stats().InUse
		maxInUse, sum, samples = max(maxInUse, n), sum+n, samples+1
	}
	mean := float64(sum) / float64(samples)
	closeOnce(release)
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
	e := newEnv(t)
	for _, bad := range []string{"0", "-1", "x", "1.5", "1001"} {
		r := e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-att"}, body: body1,
			header: map[string]string{"X-Client-Attempt": bad}})
		if r.Status != http.StatusBadRequest || r.problem(t) != apperr.InvalidHeader {
			t.Fatalf("X-Client-Attempt %q: %d %s", bad, r.Status, r.Body)
		}
	}
	if n := e.count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatal("a bad X-Client-Attempt stored its key")
	}
	e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-att"}, body: body1, header: map[string]string{"X-Client-Attempt": "2"}})
	if !eventually(func() bool { return strings.Contains(e.logs.String(), `"client_attempt":2`) }) {
		t.Fatal("the attempt number was not logged")
	}
}

// TestProblemPages: every problem's type is a page the service serves, and
// the key's errors link to it.
func TestProblemPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.must(req{path: "/v1/demo-requests", token: tokenAlice, body: body1})
	if r.problem(t) != apperr.KeyMissing || r.Header.Get("Link") != `</problems/idempotency_key_missing>; rel="describedby"` {
		t.Fatalf("missing key: %v %s", r.Header, r.Body)
	}
	page := e.must(req{method: http.MethodGet, path: "/problems/idempotency_key_missing"})
	if page.Status != http.StatusOK || !strings.Contains(string(page.Body), "Idempotency-Key header missing") {
		t.Fatalf("problem page: %d %s", page.Status, page.Body)
	}
	for _, code := range apperr.Codes() {
		if r := e.must(req{method: http.MethodGet, path: "/problems/" + code}); r.Status != http.StatusOK {
			t.Errorf("no page for code %s: %d", code, r.Status)
		}
	}
	if r := e.must(req{method: http.MethodGet, path: "/problems/nope"}); r.Status != http.StatusNotFound {
		t.Fatalf("unknown problem page: %d", r.Status)
	}
}

// TestDroppedResponseIsNotLoggedAs200: a response the workshop dropped is
// logged and counted as dropped, not as the 200 net/http never sent.
func TestDroppedResponseIsNotLoggedAs200(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withWorkshop())
	if _, err := e.do(context.Background(), req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-drop"}, body: body1,
		header: map[string]string{"Workshop-Drop-Response": "true"}}); err == nil {
		t.Fatal("the dropped response arrived")
	}
	if !eventually(func() bool { return strings.Contains(e.logs.String(), `"status":0,"duration"`) }) ||
		!strings.Contains(e.logs.String(), `"response_dropped":true`) {
		t.Fatalf("the dropped response was not logged as dropped:\n%s", e.logs.String())
	}
	scrape := string(e.must(req{method: http.MethodGet, path: "/metrics"}).Body)
	if !strings.Contains(scrape, `demo_api_http_request_duration_seconds_count{route="/v1/demo-requests",status="dropped"} 1`) {
		t.Fatal("the dropped response was not counted as dropped")
	}
}

// TestPreferWaitClientGone: a retry that waits for the owner's answer and
// whose client hangs up meanwhile is logged and counted as client_gone, as
// on the other paths, not as a 409 no one read.
func TestPreferWaitClientGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withWorkshop())
	claimed, release := e.hold()
	defer closeOnce(release)
	go e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-gone"}, body: body1, header: holdHeader})
	<-claimed
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if r, err := e.do(ctx, req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{"key-gone"}, body: body1,
		header: map[string]string{"Prefer": "wait=5"}}); err == nil {
		t.Fatalf("the waiter whose client left got an answer: %d", r.Status)
	}
	var line string
	if !testkit.Eventually(5*time.Second, func() bool {
		for l := range strings.SplitSeq(e.logs.String(), "\n") {
			if strings.Contains(l, `"route":"/v1/demo-requests"`) && strings.Contains(l, `"outcome":"in_progress"`) {
				line = l
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no request line for the waiter:\n%s", e.logs.String())
	}
	if !strings.Contains(line, `"client_gone":true`) || strings.Contains(line, `"status":409`) {
		t.Fatalf("the waiter whose client left is logged as\n%s\nwant client_gone, not 409", line)
	}
}
