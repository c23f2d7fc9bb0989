package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	tokenAlice = "tok-alice-3f9a"
	tokenBob   = "tok-bob-77c1"
	testLease  = 30 * time.Second
	testTTL    = 24 * time.Hour
)

// exchangeChecker checks one request and its response as the suite
// exchanged them with the server.
type exchangeChecker func(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte)

// env is one server on its own fresh database, reached over loopback.
type env struct {
	t      *testing.T
	db     *sqlx.DB
	store  *postgres.Store
	srv    *httptest.Server
	client *http.Client
	logs   *testkit.Buffer
	// dispatcher serves the delivery routes; it calls a desk only when
	// withDesk gave it one, and only when a test runs it.
	dispatcher *delivery.Dispatcher

	path idempotency.Path
	// works counts the works that ran: past the claim on the two-phase
	// path; on the one-phase path a work decides on every attempt, and only
	// the rows tell how often its change happened.
	works atomic.Int64
	mu    sync.Mutex
	hook  func(ctx context.Context, r *http.Request) error
}

type envOption func(*httpapi.Deps, *postgres.Store)

// withClock makes the store read c instead of the database clock.
func withClock(c *testkit.Clock) envOption {
	return func(_ *httpapi.Deps, s *postgres.Store) { s.Clock = c.Now }
}

// withDesk makes the dispatcher hand deliveries to the desk at url.
func withDesk(url string) envOption {
	return func(d *httpapi.Deps, _ *postgres.Store) {
		d.Deliveries.(*delivery.Dispatcher).Desk = reviewdesk.New(url, nil)
	}
}

func withWorkshop() envOption { return func(d *httpapi.Deps, _ *postgres.Store) { d.Workshop = true } }

// withRoom makes a workshop room: any dev-<name> is the participant dev-<name>.
func withRoom() envOption {
	return func(d *httpapi.Deps, _ *postgres.Store) { d.Workshop, d.Room = true, true }
}

// withPath makes every operation take path p.
func withPath(p idempotency.Path) envOption {
	return func(d *httpapi.Deps, _ *postgres.Store) { d.Path = p }
}

// paths are the two ways an operation commits; every branch test runs on
// both.
var paths = []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase}

// forEachPath runs test once per path, each as its own parallel subtest.
func forEachPath(t *testing.T, test func(t *testing.T, p idempotency.Path)) {
	for _, p := range paths {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			test(t, p)
		})
	}
}

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{t: t, db: db, logs: &testkit.Buffer{}}
	e.store = postgres.New(e.db)
	tokens, err := auth.Parse("alice:" + auth.Hash(tokenAlice) + ",bob:" + auth.Hash(tokenBob))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(e.logs, nil))
	m := metrics.New(e.store, logger)
	e.dispatcher = &delivery.Dispatcher{Store: e.store, Logger: logger, Metrics: m.Outbox(e.store, logger), MaxAttempts: 2}
	deps := httpapi.Deps{
		Logger:     logger,
		Metrics:    m,
		Deliveries: e.dispatcher,
		Keys:       e.store,
		Demo:       &demo.Service{Store: e.store, RefusedTopics: map[string]bool{"blocked": true}},
		Writes:     e.store,
		Tokens:     tokens,
		Ready:      e.store.Ping,
		TTL:        testTTL,
		Lease:      testLease,
		InWork: func(ctx context.Context, r *http.Request) error {
			e.works.Add(1)
			e.mu.Lock()
			hook := e.hook
			e.mu.Unlock()
			if hook != nil {
				return hook(ctx, r)
			}
			return nil
		},
	}
	for _, o := range opts {
		o(&deps, e.store)
	}
	e.path = deps.Path
	h, err := httpapi.NewServer(deps)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	// Every exchange of the suite is checked against api/openapi.yaml.
	e.client = &http.Client{Timeout: 30 * time.Second,
		Transport: &checkingTransport{t: t, next: http.DefaultTransport, checks: []exchangeChecker{checkOpenAPI}}}
	t.Cleanup(func() {
		e.srv.Close() // waits for in-flight requests, and so for their log lines
		e.checkLogs(t)
	})
	return e
}

// setHook runs h inside every work after the claim.
func (e *env) setHook(h func(ctx context.Context, r *http.Request) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hook = h
}

// reply is a response as read.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// problem decodes a problem body.
func (r reply) problem(t testing.TB) (code string) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q, want a problem: %s", r.Status, ct, r.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.Body, err)
	}
	if p.Status != r.Status || p.Type == "" || p.Code == "" {
		t.Fatalf("problem %s does not match status %d", r.Body, r.Status)
	}
	return p.Code
}

// created decodes a demo request.
func (r reply) request(t testing.TB) demo.Request {
	t.Helper()
	var dr demo.Request
	if err := json.Unmarshal(r.Body, &dr); err != nil || dr.ID == "" {
		t.Fatalf("body %s is not a demo request: %v", r.Body, err)
	}
	return dr
}

// req is one request to send.
type req struct {
	method, path, token, body string
	header                    map[string]string
	keys                      []string // Idempotency-Key values, each a header line
}

func (e *env) do(ctx context.Context, rq req) (reply, error) {
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	r, err := http.NewRequestWithContext(ctx, rq.method, e.srv.URL+rq.path, strings.NewReader(rq.body))
	if err != nil {
		return reply{}, err
	}
	if rq.token != "" {
		r.Header.Set("Authorization", "Bearer "+rq.token)
	}
	if rq.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for _, k := range rq.keys {
		r.Header.Add("Idempotency-Key", k)
	}
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	// Each attempt is the test's: the transport must not resend a request
	// with an Idempotency-Key on its own when a reused connection closes
	// without an answer (a dropped response).
	r.GetBody = nil
	if r.Body == http.NoBody {
		r.Body = io.NopCloser(strings.NewReader(""))
	}
	resp, err := e.client.Do(r)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

func (e *env) must(rq req) reply {
	e.t.Helper()
	r, err := e.do(context.Background(), rq)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// create posts a demo request as alice with key.
func (e *env) create(key, body string) reply {
	e.t.Helper()
	return e.must(req{path: "/v1/demo-requests", token: tokenAlice, keys: []string{key}, body: body})
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	return testkit.Count(e.t, e.db, query, args...)
}

// checkWorks fails the test if a claimed work ran other than n times. Only
// the two-phase path runs its work once per claim.
func (e *env) checkWorks(n int64) {
	e.t.Helper()
	if got := e.works.Load(); e.path == idempotency.TwoPhase && got != n {
		e.t.Fatalf("the work ran %d times, want %d", got, n)
	}
}

// holdHeader marks a request that a test holds inside its work; it carries
// Workshop-Delay too, which takes it on the two-phase path, so it holds a
// claim.
var holdHeader = map[string]string{"Workshop-Delay": "1ms", "X-Test-Hold": "1"}

// hold holds every request with holdHeader after its claim until release is
// closed; claimed receives once per held request.
func (e *env) hold() (claimed chan struct{}, release chan struct{}) {
	claimed, release = make(chan struct{}, 16), make(chan struct{})
	e.t.Cleanup(func() { closeOnce(release) })
	e.setHook(func(ctx context.Context, r *http.Request) error {
		if r.Header.Get("X-Test-Hold") == "" {
			return nil
		}
		claimed <- struct{}{}
		<-release
		return nil
	})
	return claimed, release
}

// checkLogs fails the test if the server logged a token, a raw key, or a
// request body.
func (e *env) checkLogs(t *testing.T) {
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"request"`) {
		t.Errorf("no request was logged")
	}
	for _, secret := range append([]string{tokenAlice, tokenBob, auth.Hash(tokenAlice)}, sensitive...) {
		if strings.Contains(logs, secret) {
			t.Errorf("the server logged %q", secret)
		}
	}
}

// sensitive are strings the tests put in keys and bodies; none may reach a
// log line.
var sensitive = []string{"key-", "topic-", "note-"}

// checkingTransport hands every exchange to its checks.
type checkingTransport struct {
	t      testing.TB
	next   http.RoundTripper
	checks []exchangeChecker
}

func (c *checkingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var reqBody []byte
	if r.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := c.next.RoundTrip(r)
	if err != nil || len(c.checks) == 0 {
		return resp, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	for _, check := range c.checks {
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		check(c.t, r, reqBody, resp, respBody)
	}
	return resp, nil
}

// closeOnce closes a channel that a test may already have closed: held
// requests are released in a t.Cleanup too, so a failed test cannot hang.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// eventually reports whether cond becomes true within two seconds.
func eventually(cond func() bool) bool { return testkit.Eventually(2*time.Second, cond) }
