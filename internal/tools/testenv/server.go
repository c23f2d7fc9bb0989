package testenv

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
	"github.com/demo-api/demo-api/internal/workshop"
)

const (
	TokenAlice = "tok-alice-3f9a" // alice's bearer token
	TokenBob   = "tok-bob-77c1"   // bob's
	Lease      = 30 * time.Second // the servers' lease
	TTL        = 24 * time.Hour   // and TTL
)

// Env is one server on its own database over loopback, every exchange
// checked against the contract and its log for secrets.
type Env struct {
	T      *testing.T // the test the Env is for
	DB     *sqlx.DB
	Store  *postgres.Store
	Srv    *httptest.Server
	Client *http.Client
	Logs   *Buffer
	// Dispatcher serves the delivery routes; a test runs it (WithDesk).
	Dispatcher *delivery.Dispatcher
	Path       idempotency.Path
	Works      atomic.Int64 // works run past the claim: on the one-phase path, every attempt's
	hook       atomic.Pointer[func(ctx context.Context, r *http.Request) error]
}

// Option changes the server an Env makes.
type Option func(*httpapi.Deps, *postgres.Store)

// WithClock makes the store read c instead of the database clock.
func WithClock(c *Clock) Option { return func(_ *httpapi.Deps, s *postgres.Store) { s.Clock = c.Now } }

// WithDesk makes the dispatcher hand deliveries to the desk at url.
func WithDesk(url string) Option {
	return func(d *httpapi.Deps, _ *postgres.Store) {
		d.Deliveries.Desk = reviewdesk.New(url, nil)
	}
}

// WithWorkshop turns the workshop knobs on.
func WithWorkshop() Option {
	return func(d *httpapi.Deps, _ *postgres.Store) { d.Workshop, d.Decorate = true, workshop.Knobs(Lease/2) }
}

// WithPath makes every operation take path p.
func WithPath(p idempotency.Path) Option {
	return func(d *httpapi.Deps, _ *postgres.Store) { d.Path = p }
}

// ForEachPath runs test on each commit path, as parallel subtests.
func ForEachPath(t *testing.T, test func(t *testing.T, p idempotency.Path)) {
	for _, p := range []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			test(t, p)
		})
	}
}

// New makes an Env with the template's operations and deps, changed by opts.
func New(t *testing.T, opts ...Option) *Env {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &Env{T: t, DB: db, Store: pgtest.NewStore(db), Logs: &Buffer{}}
	tokens, err := auth.Parse("alice:" + auth.Hash(TokenAlice) + ",bob:" + auth.Hash(TokenBob))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(e.Logs, nil))
	m := metrics.New(e.Store, logger)
	e.Dispatcher = &delivery.Dispatcher{Store: e.Store, Logger: logger, Metrics: m.Outbox(e.Store, logger), MaxAttempts: 2}
	deps := httpapi.Deps{
		Logger:     logger,
		Metrics:    m,
		Deliveries: e.Dispatcher,
		Keys:       e.Store.Watched(),
		Demo:       &demo.Service{Store: e.Store, RefusedTopics: map[string]bool{"blocked": true}},
		Writes:     e.Store,
		Tokens:     tokens,
		Ready:      e.Store.Ping,
		Decorate:   workshop.Off,
		TTL:        TTL,
		Lease:      Lease,
	}
	for _, o := range opts {
		o(&deps, e.Store)
	}
	deps.Decorate = e.inWork(deps.Decorate)
	e.Path = deps.Path
	h, err := httpapi.NewServer(deps)
	if err != nil {
		t.Fatal(err)
	}
	e.Srv = httptest.NewServer(h)
	e.Client = &http.Client{Timeout: 30 * time.Second, Transport: &checkingTransport{t: t}}
	t.Cleanup(func() {
		e.Srv.Close() // waits for in-flight requests, and so for their log lines
		logs := e.Logs.String()
		if !strings.Contains(logs, `"msg":"request"`) {
			t.Errorf("no request was logged")
		}
		// The tests' words for keys and bodies; on a failure, the first warnings.
		checkNoSecrets(t, logs, "key-", "topic-", "note-")
		if t.Failed() {
			n := 0
			for line := range strings.Lines(logs) {
				if n < 20 && (strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`)) {
					t.Log("server: " + strings.TrimSpace(line))
					n++
				}
			}
		}
	})
	return e
}

// SetHook runs h inside every work after the claim.
// inWork decorates every attempt so that its work, before decorate's Hold
// and the decision, counts itself in e.Works and runs the test's hook (SetHook).
func (e *Env) inWork(decorate workshop.Decorator) workshop.Decorator {
	return func(r *http.Request) (d workshop.Decoration, err error) {
		if decorate != nil {
			if d, err = decorate(r); err != nil {
				return d, err
			}
		}
		hold := d.Hold
		d.Hold = func(ctx context.Context) error {
			e.Works.Add(1)
			if hook := e.hook.Load(); hook != nil && *hook != nil {
				if err := (*hook)(ctx, r); err != nil {
					return err
				}
			}
			if hold == nil {
				return nil
			}
			return hold(ctx)
		}
		return d, nil
	}
}

func (e *Env) SetHook(h func(ctx context.Context, r *http.Request) error) { e.hook.Store(&h) }

// Reply is a response as read.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// Problem decodes a problem body and returns its code.
func (r Reply) Problem(t testing.TB) (code string) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q, want a problem: %s", r.Status, ct, r.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil || p.Status != r.Status || p.Type == "" || p.Code == "" {
		t.Fatalf("problem %s does not match status %d: %v", r.Body, r.Status, err)
	}
	return p.Code
}

// Request decodes a demo request.
func (r Reply) Request(t testing.TB) demo.Request {
	t.Helper()
	var dr demo.Request
	if err := json.Unmarshal(r.Body, &dr); err != nil || dr.ID == "" {
		t.Fatalf("body %s is not a demo request: %v", r.Body, err)
	}
	return dr
}

// Do sends rq, once, to the Env's server.
func (e *Env) Do(ctx context.Context, rq Req) (Reply, error) {
	resp, body, err := send(ctx, e.Client, e.Srv.URL, rq)
	if resp == nil {
		return Reply{}, err
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// Must is Do, failing the test on an error.
func (e *Env) Must(rq Req) Reply {
	e.T.Helper()
	r, err := e.Do(context.Background(), rq)
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// Create posts a demo request as alice with key.
func (e *Env) Create(key, body string) Reply {
	e.T.Helper()
	return e.Must(Req{Path: "/v1/demo-requests", Token: TokenAlice, Keys: []string{key}, Body: body})
}

// Count is the number the query counts.
func (e *Env) Count(query string, args ...any) int {
	e.T.Helper()
	return Count(e.T, e.DB, query, args...)
}

// CheckWorks fails the test unless the work ran n times (two-phase path).
func (e *Env) CheckWorks(n int64) {
	e.T.Helper()
	if got := e.Works.Load(); e.Path == idempotency.TwoPhase && got != n {
		e.T.Fatalf("the work ran %d times, want %d", got, n)
	}
}

// HoldHeader marks a request Hold holds inside its work (two-phase path).
var HoldHeader = map[string]string{"Workshop-Delay": "1ms", "X-Test-Hold": "1"}

// Hold holds every request with HoldHeader after its claim until release
// closes; claimed receives once per held request.
func (e *Env) Hold() (claimed chan struct{}, release chan struct{}) {
	claimed, release = make(chan struct{}, 16), make(chan struct{})
	e.T.Cleanup(func() { CloseOnce(release) })
	e.SetHook(func(ctx context.Context, r *http.Request) error {
		if r.Header.Get("X-Test-Hold") == "" {
			return nil
		}
		claimed <- struct{}{}
		<-release
		return nil
	})
	return claimed, release
}

// checkNoSecrets fails t if logs hold a token or any of words.
func checkNoSecrets(t testing.TB, logs string, words ...string) {
	for _, secret := range append([]string{TokenAlice, TokenBob, auth.Hash(TokenAlice)}, words...) {
		if strings.Contains(logs, secret) {
			t.Errorf("the server logged %q", secret)
		}
	}
}

// CloseOnce closes a channel a test may have closed already.
func CloseOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
