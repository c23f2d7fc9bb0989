package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// serveInProcess runs demo-api serve through run() on a fresh database and
// returns its base URL and the database.
// shutdownBound is how long serve may take to end once cancelled: its
// SHUTDOWN_TIMEOUT (25 s by default) for the requests in flight, and a
// little more for its background work.
const shutdownBound = 30 * time.Second

func serveInProcess(t *testing.T, env ...string) (string, *sqlx.DB) {
	t.Helper()
	dbURL := pgtest.NewURL(t)
	vars := map[string]string{"DATABASE_URL": dbURL, "LISTEN_ADDR": "127.0.0.1:0", "WORKSHOP": "true",
		"API_TOKENS": "alice:" + auth.Hash(e2eToken), "LOG_FORMAT": "json"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, w, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(shutdownBound):
			t.Errorf("serve did not stop within %s of its cancel", shutdownBound)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no address: %v", err)
	}
	go io.Copy(io.Discard, out)
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return strings.TrimSpace(strings.TrimPrefix(line, "demo-api listening on ")), db
}

// recorder is a reverse proxy in front of the server that records each
// POST's path, key, X-Client-Attempt, time and Authorization, every
// request in order, and adds headers to chosen
// attempts. A connection the server closed without an answer is closed the
// same way to the client.
type recorder struct {
	mu       sync.Mutex
	paths    []string
	keys     []string
	attempts []string
	times    []time.Time                  // when each POST arrived
	auths    []string                     // the Authorization of each POST
	calls    []string                     // every request in order: method, path and query, key
	add      map[string]map[string]string // X-Client-Attempt → headers
	cut      bool                         // close every connection without forwarding: the server is out of reach
}

func (rec *recorder) proxy(t *testing.T, target string) string {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			rec.mu.Lock()
			rec.paths = append(rec.paths, r.URL.Path)
			rec.keys = append(rec.keys, r.Header.Get("Idempotency-Key"))
			rec.attempts = append(rec.attempts, r.Header.Get("X-Client-Attempt"))
			rec.times = append(rec.times, time.Now())
			rec.auths = append(rec.auths, r.Header.Get("Authorization"))
			for k, v := range rec.add[r.Header.Get("X-Client-Attempt")] {
				r.Header.Set(k, v)
			}
			rec.mu.Unlock()
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Idempotency-Key"))
		cut := rec.cut
		rec.mu.Unlock()
		if cut {
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// setCut makes the server out of reach (every connection closed unanswered)
// or reachable again.
func (rec *recorder) setCut(cut bool) {
	rec.mu.Lock()
	rec.cut = cut
	rec.mu.Unlock()
}

// checkAttempts fails unless every attempt carried key, numbered 1..n.
func (rec *recorder) checkAttempts(t *testing.T, key string) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, k := range rec.keys {
		if k != key || rec.attempts[i] != strconv.Itoa(i+1) {
			t.Fatalf("attempt %d carried key %s, X-Client-Attempt %s; want %s, %d", i+1, k, rec.attempts[i], key, i+1)
		}
	}
}

func rows(t *testing.T, db *sqlx.DB) int {
	return testkit.Count(t, db, `SELECT count(*) FROM demo_requests`)
}

// TestClientAgainstTheServer runs the Go client against the real server
// over loopback: each case ends with exactly the business rows the contract
// allows, and every attempt of an intent carried its one key.
func TestClientAgainstTheServer(t *testing.T) {
	testkit.Long(t, "a long end-to-end run of the client against the binary")
	t.Parallel()
	ctx := context.Background()
	base, db := serveInProcess(t)
	newClient := func(url string, budget, attempt time.Duration) *client.Client {
		c, err := client.New(client.Config{BaseURL: url, Token: e2eToken, Budget: budget, AttemptTimeout: attempt})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hold := func(key, delay string) chan struct{} { // a first request of key, held in its work
		done := make(chan struct{})
		go func() {
			defer close(done)
			testkit.PostCreate(ctx, base, e2eToken, key, `{"topic":"client"}`, "Workshop-Delay", delay)
		}()
		testkit.Eventually(5*time.Second, func() bool {
			return testkit.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, key) == 1
		})
		return done
	}
	intent := func(key string) *client.Intent {
		it, _ := client.NewIntent(client.CreateInput{Topic: "client"})
		if key != "" {
			it.Key = key
		}
		return it
	}

	t.Run("lost response: the retry gets the replay", func(t *testing.T) {
		before := rows(t, db)
		rec := &recorder{add: map[string]map[string]string{"1": {"Workshop-Drop-Response": "true"}}}
		it := intent("")
		res, err := newClient(rec.proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		if err != nil || !res.Replayed || res.Attempts != 2 {
			t.Fatalf("got %+v, %v; want the replay on attempt 2", res, err)
		}
		rec.checkAttempts(t, it.Key)
		if n := rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("in progress, with Prefer: wait", func(t *testing.T) {
		before := rows(t, db)
		it := intent("client-wait")
		// Held 1 s; an attempt of 3 s asks to wait 2 s, so the first
		// attempt gets the answer even on a busy machine.
		done := hold(it.Key, "1s")
		res, err := newClient(base, 6*time.Second, 3*time.Second).Send(ctx, it)
		<-done
		if err != nil || !res.Replayed || !res.Waited {
			t.Fatalf("got %+v, %v; want the replay after waiting", res, err)
		}
		if n := rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("in progress, without waiting: retries after Retry-After", func(t *testing.T) {
		before := rows(t, db)
		it := intent("client-409")
		done := hold(it.Key, "1500ms")
		var statuses []int
		c, _ := client.New(client.Config{BaseURL: base, Token: e2eToken, Budget: 3 * time.Second, AttemptTimeout: time.Second,
			OnAttempt: func(a client.Attempt) { statuses = append(statuses, a.Status) }})
		res, err := c.Send(ctx, it)
		<-done
		if err != nil || !res.Replayed || statuses[0] != http.StatusConflict {
			t.Fatalf("got %+v, %v, statuses %v; want a 409, then the replay", res, err, statuses)
		}
		if n := rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("a released 503, then success", func(t *testing.T) {
		before := rows(t, db)
		rec := &recorder{add: map[string]map[string]string{"1": {"Workshop-Fail": "after-claim"}}}
		it := intent("")
		res, err := newClient(rec.proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		if err != nil || res.Replayed || res.Attempts != 2 {
			t.Fatalf("got %+v, %v; want a fresh 201 on attempt 2", res, err)
		}
		rec.checkAttempts(t, it.Key)
		if n := rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("422 mismatch: not retried", func(t *testing.T) {
		testkit.PostCreate(ctx, base, e2eToken, "client-mismatch", `{"topic":"first"}`)
		before := rows(t, db)
		rec := &recorder{}
		it := intent("client-mismatch")
		_, err := newClient(rec.proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		var p *client.ProblemError
		if !errors.As(err, &p) || p.Code != "key_payload_mismatch" || len(rec.keys) != 1 {
			t.Fatalf("got %v after %d attempts; want one 422", err, len(rec.keys))
		}
		if n := rows(t, db) - before; n != 0 {
			t.Fatalf("%d rows, want 0", n)
		}
	})

	t.Run("no answer within the budget: outcome unknown, then Resolve", func(t *testing.T) {
		before := rows(t, db)
		rec := &recorder{add: map[string]map[string]string{"1": {"Workshop-Delay": "3s"}}}
		it := intent("")
		c := newClient(rec.proxy(t, base), 1500*time.Millisecond, time.Second)
		_, err := c.Send(ctx, it)
		var unknown *client.OutcomeUnknownError
		if !errors.As(err, &unknown) || unknown.Key != it.Key {
			t.Fatalf("got %v, want outcome unknown for %s", err, it.Key)
		}
		rec.checkAttempts(t, it.Key)
		var o client.Outcome
		if !testkit.Eventually(10*time.Second, func() bool {
			o, err = c.Resolve(ctx, it.Operation, it.Key)
			return err == nil && o.State == "completed"
		}) {
			t.Fatalf("resolve: %+v, %v", o, err)
		}
		if o.Status != http.StatusCreated || o.ResultID == "" {
			t.Fatalf("resolved %+v, want the 201 and its request", o)
		}
		if n := rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
		if never, err := c.Resolve(ctx, client.OperationCreate, "never-sent"); err != nil || never.State != "unknown" {
			t.Fatalf("resolve of a key never sent: %+v, %v", never, err)
		}
	})
	// created makes a request to cancel, straight to the server.
	created := func() string {
		_, body, err := testkit.PostCreate(ctx, base, e2eToken, uuid.NewString(), `{"topic":"to cancel"}`)
		var dr client.DemoRequest
		if err != nil || json.Unmarshal(body, &dr) != nil || dr.RequestID == "" {
			t.Fatalf("create a request to cancel: %v %s", err, body)
		}
		return dr.RequestID
	}

	t.Run("cancel: a lost response, then the retry replays; a second cancel is refused, not retried", func(t *testing.T) {
		id := created()
		rec := &recorder{add: map[string]map[string]string{"1": {"Workshop-Drop-Response": "true"}}}
		it, err := client.NewCancelIntent(id)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(rec.proxy(t, base), 5*time.Second, 2*time.Second)
		res, err := c.Send(ctx, it)
		if err != nil || !res.Replayed || res.Attempts != 2 || res.Status != http.StatusOK || res.Request.State != "cancelled" {
			t.Fatalf("got %+v, %v; want the replay of the 200 on attempt 2", res, err)
		}
		rec.checkAttempts(t, it.Key)
		if want := "/v1/demo-requests/" + id + "/cancel"; rec.paths[0] != want || rec.paths[1] != want {
			t.Fatalf("the attempts went to %q, want %s", rec.paths, want)
		}
		if n := testkit.Count(t, db, `SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'cancelled' AND cancelled_at = $2`,
			id, res.Request.CancelledAt); n != 1 {
			t.Fatalf("the request is not cancelled at the time the replay says (%v)", res.Request.CancelledAt)
		}
		if n := testkit.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE operation = $1 AND idem_key = $2 AND status_code = 200`,
			client.OperationCancel, it.Key); n != 1 {
			t.Fatalf("%d completed cancel keys %s, want 1", n, it.Key)
		}

		again := &recorder{}
		_, err = newClient(again.proxy(t, base), 5*time.Second, 2*time.Second).Cancel(ctx, id)
		if p, ok := errors.AsType[*client.ProblemError](err); !ok || p.Status != 422 || p.Code != "request_not_cancellable" || len(again.keys) != 1 {
			t.Fatalf("a second cancel: %v after %d attempts; want one 422 request_not_cancellable", err, len(again.keys))
		}
		if again.keys[0] == it.Key {
			t.Fatal("Cancel reused the first cancel's key; a new cancel is a new intent")
		}
	})

	t.Run("send --cancel: done, refused, outcome unknown, and --resolve of the cancel's key", func(t *testing.T) {
		id := created()
		send := func(args ...string) (string, error) {
			var out strings.Builder
			err := run(ctx, append([]string{"send", "--base", base, "--token", e2eToken}, args...), func(string) string { return "" }, &out, io.Discard)
			return out.String(), err
		}
		if out, err := send("--cancel", id, "--key", "send-cancel-"+id); err != nil || !strings.Contains(out, "cancelled: request "+id+" (200) after 1 attempt") {
			t.Fatalf("send --cancel: %v\n%s", err, out)
		}
		out, err := send("--cancel", id)
		if e, ok := errors.AsType[*exitError](err); !ok || e.code != exitRefused || !strings.Contains(out, "refused: 422 request_not_cancellable") {
			t.Fatalf("a second send --cancel: %v, want exit %d\n%s", err, exitRefused, out)
		}
		resolve := func(key, operation, want string) {
			t.Helper()
			if out, err := send("--resolve", key, "--operation", operation); err != nil || !strings.Contains(out, want) {
				t.Fatalf("send --resolve %s --operation %s: %v\n%s\nwant %q", key, operation, err, out, want)
			}
		}
		resolve("send-cancel-"+id, client.OperationCancel, "completed with 200, request "+id)
		resolve("send-cancel-"+id, client.OperationCreate, "never seen") // a key is scoped to its operation

		// A cancel held past the budget: exit 3, and the hint names the
		// cancel's operation, whose key then resolves to the 200.
		other := created()
		out, err = send("--cancel", other, "--key", "send-cancel-held", "--header", "Workshop-Delay: 3s", "--budget", "1500ms", "--attempt-timeout", "1s")
		if e, ok := errors.AsType[*exitError](err); !ok || e.code != exitUnknown || !strings.Contains(out, "--resolve send-cancel-held --operation "+client.OperationCancel) {
			t.Fatalf("a held send --cancel: %v, want exit %d with the hint\n%s", err, exitUnknown, out)
		}
		if !testkit.Eventually(10*time.Second, func() bool {
			out, err = send("--resolve", "send-cancel-held", "--operation", client.OperationCancel)
			return err == nil && strings.Contains(out, "completed with 200, request "+other)
		}) {
			t.Fatalf("resolve of the held cancel: %v\n%s", err, out)
		}
	})
}

// demo-only{ the workshop command; its every step, the desk's and the expedite's
// too, needs the stand-in desk

// TestWorkshopAll runs demo-api workshop --all against a real server with
// the knobs on and the default TTL and lease (the expiry step gives its key
// a TTL of its own): every step passes, none is skipped.
func TestWorkshopAll(t *testing.T) {
	testkit.Long(t, "a long end-to-end walk (every workshop step against a server)")
	t.Parallel()
	desk := testkit.StartDesk(t, nil)
	base, _ := serveInProcess(t, "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=3", "DISPATCH_FIRST_RETRY=200ms")
	var out strings.Builder
	err := run(testkit.Context(t), []string{"workshop", "--base", base, "--token", e2eToken, "--all", "--delay", "1200ms",
		"--provider", desk.URL},
		func(string) string { return "" }, &out, io.Discard)
	if err != nil || strings.Contains(out.String(), "FAIL") || strings.Contains(out.String(), "SKIP") {
		t.Fatalf("workshop --all: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "PASS"); n != len(workshopSteps) {
		t.Fatalf("%d steps passed, want %d:\n%s", n, len(workshopSteps), out.String())
	}
}

// TestWorkshopFailsOnAServerWithoutKnobs: a step that cannot get the
// contract's answer (here, for want of the knobs) fails the run.
func TestWorkshopFailsOnAServerWithoutKnobs(t *testing.T) {
	t.Parallel()
	base, _ := serveInProcess(t, "WORKSHOP=false")
	var out strings.Builder
	err := run(context.Background(), []string{"workshop", "--base", base, "--token", e2eToken, "--step", "transient"},
		func(string) string { return "" }, &out, io.Discard)
	if e, ok := errors.AsType[*exitError](err); !ok || e.code != exitRefused || !strings.Contains(out.String(), "WORKSHOP=true") {
		t.Fatalf("workshop against a server without knobs: %v\n%s", err, out.String())
	}
}

// }demo-only
