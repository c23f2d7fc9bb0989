package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// script is a loopback server that answers each attempt with the next of
// its answers, and records what each attempt carried.
type script struct {
	mu       sync.Mutex
	answers  []func(w http.ResponseWriter, r *http.Request)
	keys     []string
	attempts []string
	bodies   []string
	requests []string // method, path and Content-Type of each attempt
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 1024)
	n, _ := r.Body.Read(b)
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.attempts = append(s.attempts, r.Header.Get("X-Client-Attempt"))
	s.bodies = append(s.bodies, string(b[:n]))
	s.requests = append(s.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
	i := len(s.keys) - 1
	answer := s.answers[min(i, len(s.answers)-1)]
	s.mu.Unlock()
	answer(w, r)
}

func status(code int, problem string, retryAfter int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		}
		if code >= 400 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(code)
			w.Write([]byte(`{"code":"` + problem + `","detail":"scripted"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write([]byte(`{"requestId":"8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11","state":"accepted","topic":"t","note":"","createdAt":"2026-12-02T12:00:00Z"}`))
	}
}

// hang never answers within an attempt.
func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-time.After(3 * time.Second):
	case <-r.Context().Done():
	}
}

func newClient(t *testing.T, url string, budget time.Duration) *client.Client {
	c, err := client.New(client.Config{BaseURL: url, Token: "tok", Budget: budget, AttemptTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetryDecisions: which answers are retried with the same key and body,
// and which end the intent.
func TestRetryDecisions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		first    func(http.ResponseWriter, *http.Request)
		retried  bool
		wantCode string
	}{
		{"409 in progress", status(409, "operation_in_progress", 0), true, ""},
		{"429", status(429, "too_many", 0), true, ""},
		{"500, the claim released", status(500, "internal", 0), true, ""},
		{"502", status(502, "bad_gateway", 0), true, ""},
		{"503", status(503, "unavailable", 0), true, ""},
		{"504", status(504, "gateway_timeout", 0), true, ""},
		{"no answer within the attempt", hang, true, ""},
		{"400", status(400, "invalid_field", 0), false, "invalid_field"},
		{"401", status(401, "unauthorized", 0), false, "unauthorized"},
		{"404", status(404, "not_found", 0), false, "not_found"},
		{"413", status(413, "body_too_large", 0), false, "body_too_large"},
		{"415", status(415, "unsupported_media_type", 0), false, "unsupported_media_type"},
		{"422 mismatch", status(422, "key_payload_mismatch", 0), false, "key_payload_mismatch"},
		{"422 refusal", status(422, "topic_refused", 0), false, "topic_refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &script{answers: []func(http.ResponseWriter, *http.Request){tt.first, status(201, "", 0)}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
			res, err := newClient(t, srv.URL, 3*time.Second).Send(context.Background(), it)
			srv.Close() // waits for the handlers: their records are complete
			if tt.retried {
				if err != nil || res.Attempts != 2 {
					t.Fatalf("got %+v, %v; want success on the second attempt", res, err)
				}
				if s.keys[0] != s.keys[1] || s.bodies[0] != s.bodies[1] || s.attempts[0] != "1" || s.attempts[1] != "2" {
					t.Fatalf("the retry changed the intent: keys %q, bodies %q, attempts %q", s.keys, s.bodies, s.attempts)
				}
				return
			}
			var p *client.ProblemError
			if !errors.As(err, &p) || p.Code != tt.wantCode || len(s.keys) != 1 {
				t.Fatalf("got %v after %d attempts; want a definite %s after one", err, len(s.keys), tt.wantCode)
			}
		})
	}
}

// TestBudget: the budget ends the intent with outcome unknown, never
// overrun by more than a tick, even when Retry-After asks for more.
func TestBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
	}{
		{"always 503", status(503, "unavailable", 0)},
		{"409 with a Retry-After past the budget", status(409, "operation_in_progress", 30)},
		{"no answer", hang},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &script{answers: []func(http.ResponseWriter, *http.Request){tt.answer}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			const budget = 1200 * time.Millisecond
			start := time.Now()
			var attempts []client.Attempt
			c, _ := client.New(client.Config{BaseURL: srv.URL, Token: "tok", Budget: budget, AttemptTimeout: 500 * time.Millisecond,
				OnAttempt: func(a client.Attempt) { attempts = append(attempts, a) }})
			it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
			_, err := c.Send(context.Background(), it)
			took := time.Since(start)
			srv.Close()
			var unknown *client.OutcomeUnknownError
			if !errors.As(err, &unknown) || unknown.Key != it.Key || unknown.Operation != client.OperationCreate {
				t.Fatalf("got %v, want outcome unknown for key %s", err, it.Key)
			}
			if took > budget+50*time.Millisecond {
				t.Fatalf("the intent took %v, over its budget of %v", took, budget)
			}
			if len(attempts) < 2 {
				t.Fatalf("%d attempts in %v, want the budget used for retries", len(attempts), budget)
			}
			for _, k := range s.keys {
				if k != it.Key {
					t.Fatalf("an attempt carried key %s, not the intent's %s", k, it.Key)
				}
			}
		})
	}
}

// TestTheBudgetsTailIsNoBurst: against a server that is down (it closes
// every connection unanswered), the default budget's attempts stay spread
// to its end: the wait before each retry is never shorter than the
// backoff's floor for that retry (half its interval: 50 ms, 100 ms, …
// 500 ms), none starts with less than the least attempt time left, and the
// budget's last second holds at most two attempts.
func TestTheBudgetsTailIsNoBurst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var arrived []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		drop(w, r)
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL, Token: "tok"}) // the defaults: 5 s, 2 s per attempt
	if err != nil {
		t.Fatal(err)
	}
	it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
	start := time.Now()
	_, err = c.Send(context.Background(), it)
	if _, ok := errors.AsType[*client.OutcomeUnknownError](err); !ok {
		t.Fatalf("got %v, want outcome unknown", err)
	}
	srv.Close()
	testenv.CheckRetrySchedule(t, arrived, start, start.Add(5*time.Second))
}

func TestNewIntentMakesANewKey(t *testing.T) {
	a, _ := client.NewIntent(client.CreateInput{Topic: "t"})
	b, _ := client.NewIntent(client.CreateInput{Topic: "t"})
	if a.Key == b.Key || a.Key == "" {
		t.Fatalf("two intents got keys %q and %q", a.Key, b.Key)
	}
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// TestEveryAttemptIsTheClients: when a reused connection breaks without an
// answer, Go's transport would resend a request with an Idempotency-Key on
// its own, unseen; the client takes the retry itself, as its attempt 2.
func TestEveryAttemptIsTheClients(t *testing.T) {
	t.Parallel()
	ok := status(201, "", 0)
	s := &script{answers: []func(http.ResponseWriter, *http.Request){ok, drop, ok}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newClient(t, srv.URL, 5*time.Second)
	for range 2 { // the first leaves an idle connection, which the second reuses
		it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
		if _, err := c.Send(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"1", "1", "2"}; !slices.Equal(s.attempts, want) {
		t.Fatalf("the server saw attempts %v, want %v", s.attempts, want)
	}
}

// TestEveryAttemptIsTheClientsWithoutABody: the same for a cancel, which
// has no body; Go's transport would resend a bodyless request with an
// Idempotency-Key even without GetBody.
func TestEveryAttemptIsTheClientsWithoutABody(t *testing.T) {
	t.Parallel()
	ok := status(200, "", 0)
	s := &script{answers: []func(http.ResponseWriter, *http.Request){ok, drop, ok}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newClient(t, srv.URL, 5*time.Second)
	for _, id := range []string{"r1", "r2"} { // the first leaves an idle connection, which the second reuses
		it, _ := client.NewCancelIntent(id)
		if _, err := c.Send(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"1", "1", "2"}; !slices.Equal(s.attempts, want) {
		t.Fatalf("the server saw attempts %v, want %v", s.attempts, want)
	}
}

// TestResolveIsTimeBounded: against a server that accepts the connection and
// never answers, Resolve ends at the context's deadline, or at the attempt
// timeout when the context has none; it never hangs.
func TestResolveIsTimeBounded(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, read nothing, answer nothing
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	c := newClient(t, "http://"+ln.Addr().String(), 5*time.Second) // attempt timeout 500 ms
	deadlineCtx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for name, tt := range map[string]struct {
		ctx    context.Context
		within time.Duration
	}{"no deadline": {context.Background(), 2 * time.Second}, "a deadline": {deadlineCtx, time.Second}} {
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := c.Resolve(tt.ctx, client.OperationCreate, "key-hang"); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: Resolve of a server that never answers succeeded", name)
			}
			if took := time.Since(start); took > tt.within {
				t.Errorf("%s: Resolve took %v, want at most %v", name, took, tt.within)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Resolve still hangs after 5 s", name)
		}
	}
}

// TestSuccessWithoutRequestIDIsAnError: a 2xx whose body has no requestId
// is the server breaking the contract, not a success with an empty id; the
// client says so and does not retry it.
func TestSuccessWithoutRequestIDIsAnError(t *testing.T) {
	t.Parallel()
	s := &script{answers: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{}`))
	}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
	res, err := newClient(t, srv.URL, 5*time.Second).Send(context.Background(), it)
	if !errors.Is(err, client.ErrContractBroken) {
		t.Fatalf("a 201 with {}: %+v, %v; want ErrContractBroken", res, err)
	}
	if len(s.keys) != 1 {
		t.Fatalf("the client sent %d attempts, want 1", len(s.keys))
	}
}

// TestCancelIsAnIntentLikeACreate: the cancel goes through the same rules
// as the create: its own path, no body, one key on every attempt, numbered,
// and a retry after a 503.
func TestCancelIsAnIntentLikeACreate(t *testing.T) {
	t.Parallel()
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(503, "unavailable", 0), status(200, "", 0)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	it, _ := client.NewCancelIntent("8a0d8f0e")
	res, err := newClient(t, srv.URL, 3*time.Second).Send(context.Background(), it)
	srv.Close()
	if err != nil || res.Status != http.StatusOK || res.Request.RequestID == "" || res.Attempts != 2 {
		t.Fatalf("got %+v, %v; want the 200 on the second attempt", res, err)
	}
	want := "POST /v1/demo-requests/8a0d8f0e/cancel " // no body, so no Content-Type
	if s.requests[0] != want || s.requests[1] != want || s.bodies[0] != "" {
		t.Fatalf("the server saw %q with bodies %q, want %q twice with no body", s.requests, s.bodies, want)
	}
	if s.keys[0] == "" || s.keys[0] != s.keys[1] || !slices.Equal(s.attempts, []string{"1", "2"}) {
		t.Fatalf("keys %q, attempts %q: want one key, attempts 1 and 2", s.keys, s.attempts)
	}
	if _, err := client.NewCancelIntent(""); err == nil {
		t.Fatal("a cancel of no request made an intent")
	}
}

// TestSendRefusesAnIncompleteIntent: an intent without its operation,
// method, path or key is refused by name before anything is sent.
func TestSendRefusesAnIncompleteIntent(t *testing.T) {
	t.Parallel()
	s := &script{answers: []func(http.ResponseWriter, *http.Request){status(201, "", 0)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	for _, it := range []*client.Intent{
		{Method: "POST", Path: "/v1/demo-requests", Key: "k"},
		{Operation: client.OperationCreate, Path: "/v1/demo-requests", Key: "k"},
		{Operation: client.OperationCreate, Method: "POST", Key: "k"},
		{Operation: client.OperationCreate, Method: "POST", Path: "/v1/demo-requests"},
	} {
		if _, err := c.Send(context.Background(), it); err == nil || !strings.Contains(err.Error(), "Operation, Method, Path and Key") {
			t.Errorf("Send(%+v): %v; want a refusal that names what it needs", it, err)
		}
	}
	srv.Close()
	if len(s.keys) != 0 {
		t.Fatalf("the server saw %d requests, want none", len(s.keys))
	}
}

// TestResolveNamesTheOperation: the outcome route is asked about the key of
// the operation named, since a key is scoped to its operation.
func TestResolveNamesTheOperation(t *testing.T) {
	t.Parallel()
	var asked []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Write([]byte(`{"state":"completed","status":200,"resultId":"r1"}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	o, err := c.Resolve(context.Background(), client.OperationCancel, "k 1")
	if err != nil || o.State != "completed" || o.Status != 200 || o.ResultID != "r1" {
		t.Fatalf("got %+v, %v", o, err)
	}
	if _, err := c.Resolve(context.Background(), client.OperationCreate, "k2"); err != nil {
		t.Fatal(err)
	}
	want := []string{"/v1/idempotency-keys/k 1?operation=demo-requests.cancel", "/v1/idempotency-keys/k2?operation=demo-requests.create"}
	if !slices.Equal(asked, want) {
		t.Fatalf("asked %q, want %q", asked, want)
	}
}

// TestRateLimitedRun: a budget spent on 429s alone is known to have stored
// nothing, and says when to send again; a run with any other answer, or
// none, among them stays unknown.
func TestRateLimitedRun(t *testing.T) {
	t.Parallel()
	limited := status(429, "rate_limited", 2)
	cases := []struct {
		name    string
		answers []func(w http.ResponseWriter, r *http.Request)
		limited bool
	}{
		{"429 on every attempt", []func(w http.ResponseWriter, r *http.Request){limited}, true},
		{"a 503, then 429s", []func(w http.ResponseWriter, r *http.Request){status(503, "unavailable", 0), limited}, false},
		{"no answer, then 429s", []func(w http.ResponseWriter, r *http.Request){hang, limited}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := &script{answers: c.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			it, _ := client.NewIntent(client.CreateInput{Topic: "t"})
			_, err := newClient(t, srv.URL, 1500*time.Millisecond).Send(context.Background(), it)
			rl, isLimited := errors.AsType[*client.RateLimitedError](err)
			_, isUnknown := errors.AsType[*client.OutcomeUnknownError](err)
			switch {
			case c.limited && (!isLimited || rl.Key != it.Key || rl.Attempts < 1 || rl.RetryAfter != 2*time.Second):
				t.Fatalf("got %v, want rate limited for key %s after Retry-After 2s", err, it.Key)
			case !c.limited && !isUnknown:
				t.Fatalf("got %v, want outcome unknown", err)
			}
		})
	}
}
