package tracing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
	"github.com/demo-api/demo-api/internal/tracing"
	"github.com/demo-api/demo-api/internal/workshop"
)

// The tests of this file share the package's tracing (tracing.Use), so
// none runs in parallel.

func TestMain(m *testing.M) { pgtest.Main(m) }

const token = "tok-tracing-5e1d"

// recorder is a provider of the SDK that keeps every ended span in memory,
// in use (tracing.Use) until the test ends.
func recorder(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Use(tp)
	t.Cleanup(func() {
		tracing.Use(nil)
		tp.Shutdown(context.Background())
	})
	return exp
}

// server is the API on a fresh database, over loopback.
type server struct {
	url   string
	db    *sqlx.DB
	store *postgres.Store
	logs  *testenv.Buffer
	mu    sync.Mutex
	hold  func(ctx context.Context) error // runs inside each work, after the claim
}

// newServer starts the API with every operation on path p. Tracing must be
// set (or left off) before: the server decides then whether it traces.
func newServer(t *testing.T, p idempotency.Path) *server {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := &server{db: db, store: postgres.New(db), logs: &testenv.Buffer{}}
	tokens, err := auth.Parse("alice:" + auth.Hash(token))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(s.logs, nil))
	h, err := httpapi.NewServer(httpapi.Deps{
		Logger: logger, Keys: s.store, Writes: s.store, Tokens: tokens, Ready: s.store.Ping,
		Demo: &demo.Service{Store: s.store}, TTL: 24 * time.Hour, Lease: 30 * time.Second, Path: p,
		Deliveries: &delivery.Dispatcher{Store: s.store, Logger: logger},
		Decorate: func(*http.Request) (workshop.Decoration, error) {
			return workshop.Decoration{Hold: func(ctx context.Context) error {
				s.mu.Lock()
				hold := s.hold
				s.mu.Unlock()
				if hold != nil {
					return hold(ctx)
				}
				return nil
			}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// traceparent is a caller's trace context for a new trace: the server's
// spans of the request join it, so a test finds them by its id.
func traceparent(t *testing.T, n int) (header string, id trace.TraceID) {
	t.Helper()
	hex := fmt.Sprintf("%032x", 0x7e57000+n)
	id, err := trace.TraceIDFromHex(hex)
	if err != nil {
		t.Fatal(err)
	}
	return "00-" + hex + "-00f067aa0ba902b7-01", id
}

// create posts a create under key in the trace n and returns its status.
func (s *server) create(t *testing.T, key, body string, n int) (int, trace.TraceID) {
	t.Helper()
	tp, id := traceparent(t, n)
	resp, _, err := testenv.PostCreate(testenv.Context(t), s.url, token, key, body, "traceparent", tp)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, id
}

// spansOf waits until the trace id holds a span named last (the request's,
// which ends after the others), and returns the trace's spans.
func spansOf(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, last string) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	ok := testenv.Eventually(10*time.Second, func() bool {
		got = got[:0]
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == id {
				got = append(got, s)
			}
		}
		return slices.ContainsFunc(got, func(s tracetest.SpanStub) bool { return s.Name == last })
	})
	if !ok {
		t.Fatalf("trace %s: no span %q among %v", id, last, names(got))
	}
	return got
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}

// one returns the one span named name, failing t unless there is one.
func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1, among %v", len(found), name, names(spans))
	}
	return found[0]
}

// attrs are a span's attributes, as text.
func attrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// wantAttrs fails t unless span s has each attribute of want.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %q: %s = %q, want %q (attributes %v)", s.Name, k, got[k], v, got)
		}
	}
}

// childOf fails t unless child's parent is parent.
func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("span %q is not a child of %q", child.Name, parent.Name)
	}
}

// statements are the names of the statement spans among spans that are
// children of parent.
func statements(spans tracetest.SpanStubs, parent tracetest.SpanStub) []string {
	var n []string
	for _, s := range spans {
		if strings.HasSuffix(s.Name, ".sql") && s.Parent.SpanID() == parent.SpanContext.SpanID() {
			n = append(n, s.Name)
		}
	}
	return n
}

// logLine returns the request log line of the trace id, waiting for it.
func (s *server) logLine(t *testing.T, id trace.TraceID) map[string]any {
	t.Helper()
	var line map[string]any
	ok := testenv.Eventually(10*time.Second, func() bool {
		for l := range strings.Lines(s.logs.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["trace_id"] == id.String() {
				line = m
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("no request log line with trace_id %s in:\n%s", id, s.logs.String())
	}
	return line
}

const createRoute = "POST /v1/demo-requests"

// TestSpansOfTheBranches: on each path, a claim, a replay and a mismatch
// each make the request's span (named after its route), the idempotency
// decision's span inside it with the operation, outcome, path and replay,
// and the spans of the statements the decision ran, named after their
// files; the request's log line carries the trace id.
func TestSpansOfTheBranches(t *testing.T) {
	exp := recorder(t)
	// The statements each path runs for a first request (claim) and for a
	// request that finds the key taken (replay, mismatch).
	want := map[idempotency.Path]struct {
		outcome      idempotency.Outcome
		first, taken []string
	}{
		idempotency.OnePhase: {idempotency.OutcomeCompleted, []string{"create_demo_request.sql"}, []string{"create_demo_request.sql"}},
		idempotency.TwoPhase: {idempotency.OutcomeClaimed, []string{"claim.sql", "create_demo_request.sql"}, []string{"claim.sql"}},
	}
	n := 0
	for _, p := range []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase} {
		t.Run(string(p), func(t *testing.T) {
			s := newServer(t, p)
			for _, step := range []struct {
				name, body string
				status     int
				outcome    idempotency.Outcome
				replayed   bool
				code       string
				statements []string
			}{
				{"first", `{"topic":"t","note":"first"}`, 201, want[p].outcome, false, "", want[p].first},
				{"replay", `{"topic":"t","note":"first"}`, 201, idempotency.OutcomeReplayed, true, "", want[p].taken},
				{"mismatch", `{"topic":"t","note":"other"}`, 422, idempotency.OutcomeMismatch, false, "key_payload_mismatch", want[p].taken},
			} {
				n++
				status, id := s.create(t, "key-branches", step.body, n)
				if status != step.status {
					t.Fatalf("%s: status %d, want %d", step.name, status, step.status)
				}
				spans := spansOf(t, exp, id, createRoute)
				req := one(t, spans, createRoute)
				if req.Parent.TraceID() != id || !req.Parent.IsRemote() {
					t.Errorf("%s: the request's span does not continue the caller's traceparent", step.name)
				}
				wantAttrs(t, req, map[string]string{"http.route": "/v1/demo-requests", "http.response.status_code": fmt.Sprint(step.status)})
				decision := one(t, spans, "idempotency")
				childOf(t, decision, req)
				wantAttrs(t, decision, map[string]string{
					"idempotency.operation": "demo-requests.create", "idempotency.outcome": string(step.outcome),
					"idempotency.path": string(p), "idempotency.replayed": fmt.Sprint(step.replayed),
				})
				if got := attrs(decision)["idempotency.code"]; got != step.code {
					t.Errorf("%s: idempotency.code %q, want %q", step.name, got, step.code)
				}
				if got := statements(spans, decision); !slices.Equal(got, step.statements) {
					t.Errorf("%s: statement spans %v under the decision, want %v", step.name, got, step.statements)
				}
				for _, st := range spans {
					if strings.HasSuffix(st.Name, ".sql") {
						wantAttrs(t, st, map[string]string{"db.system.name": "postgresql"})
					}
				}
				if line := s.logLine(t, id); line["outcome"] != string(step.outcome) {
					t.Errorf("%s: the log line with the trace id has outcome %v, want %s", step.name, line["outcome"], step.outcome)
				}
			}
		})
	}
}

// TestSpanOfAnInProgressAnswer: a retry while the first attempt still runs
// (two-phase: its work is held after the claim) gets 409, and its decision's
// span says in_progress with the code operation_in_progress.
func TestSpanOfAnInProgressAnswer(t *testing.T) {
	exp := recorder(t)
	s := newServer(t, idempotency.TwoPhase)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.mu.Lock()
	s.hold = func(ctx context.Context) error {
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	s.mu.Unlock()
	first := make(chan int, 1)
	go func() {
		status, _ := s.create(t, "key-busy", `{"topic":"t","note":"n"}`, 100)
		first <- status
	}()
	select {
	case <-held:
	case <-testenv.Context(t).Done():
		t.Fatal("the first attempt never reached its work")
	}
	status, id := s.create(t, "key-busy", `{"topic":"t","note":"n"}`, 101)
	close(release)
	if status != http.StatusConflict {
		t.Fatalf("a retry while the first runs: status %d, want 409", status)
	}
	if got := <-first; got != http.StatusCreated {
		t.Fatalf("the first attempt: status %d, want 201", got)
	}
	spans := spansOf(t, exp, id, createRoute)
	decision := one(t, spans, "idempotency")
	childOf(t, decision, one(t, spans, createRoute))
	wantAttrs(t, decision, map[string]string{
		"idempotency.operation": "demo-requests.create", "idempotency.outcome": string(idempotency.OutcomeInProgress),
		"idempotency.path": string(idempotency.TwoPhase), "idempotency.replayed": "false",
		"idempotency.code": "operation_in_progress",
	})
	if got := statements(spans, decision); !slices.Equal(got, []string{"claim.sql"}) {
		t.Errorf("statement spans %v under the decision, want [claim.sql]", got)
	}
	s.logLine(t, id)
}

// TestSpansOfADelivery: the dispatcher's delivery of an accepted request is
// a span with the request, the desk's key derived from it and the state it
// decided, and its call to the desk a child span with that key; the
// statements it runs inside are its children too.
func TestSpansOfADelivery(t *testing.T) {
	exp := recorder(t)
	s := newServer(t, idempotency.OnePhase)
	if status, _ := s.create(t, "key-delivery", `{"topic":"t","note":"n"}`, 200); status != http.StatusCreated {
		t.Fatalf("create: status %d", status)
	}
	var requestID string
	if err := s.db.Get(&requestID, `SELECT id FROM demo_requests`); err != nil {
		t.Fatal(err)
	}
	desk := testenv.StartDeskDouble(t)
	var traceparents []string
	var mu sync.Mutex
	d := &delivery.Dispatcher{Store: s.store, Desk: reviewdesk.New(desk.URL, &http.Client{Transport: headerSpy(&mu, &traceparents)}),
		Logger: slog.New(slog.DiscardHandler)}
	if n, err := d.Once(testenv.Context(t)); err != nil || n != 1 {
		t.Fatalf("Once: %d rows, %v; want 1", n, err)
	}
	var del tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		if sp.Name == "delivery submit" {
			del = sp
		}
	}
	if del.Name == "" {
		t.Fatalf("no delivery span among %v", names(exp.GetSpans()))
	}
	key := delivery.ProviderKey(requestID)
	wantAttrs(t, del, map[string]string{"delivery.request_id": requestID, "delivery.kind": "submit",
		"delivery.key": key, "delivery.attempt": "1", "delivery.state": delivery.Submitted})
	spans := spansOf(t, exp, del.SpanContext.TraceID(), "delivery submit")
	call := one(t, spans, "reviewdesk submit")
	childOf(t, call, del)
	wantAttrs(t, call, map[string]string{"reviewdesk.key": key, "http.response.status_code": "201"})
	mu.Lock()
	if len(traceparents) != 1 || !strings.Contains(traceparents[0], call.SpanContext.SpanID().String()) {
		t.Errorf("the desk's call carried traceparent %q, want the call span's %s", traceparents, call.SpanContext.SpanID())
	}
	mu.Unlock()

	// A later event names its own key: the request's second cancel.
	if _, err := s.db.Exec(`INSERT INTO outbox (request_id, actor_id, kind, seq, position, next_attempt_at, created_at, updated_at)
		SELECT id, actor_id, 'cancel', 2, 2, now(), now(), now() FROM demo_requests WHERE id = $1`, requestID); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Once(testenv.Context(t)); err != nil || n != 1 {
		t.Fatalf("Once: %d rows, %v; want the cancel", n, err)
	}
	var cancel tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		if sp.Name == "delivery cancel" {
			cancel = sp
		}
	}
	wantAttrs(t, cancel, map[string]string{"delivery.kind": "cancel", "delivery.key": key + ":cancel:2"})
}

// headerSpy is a transport that keeps the traceparent of each request.
func headerSpy(mu *sync.Mutex, seen *[]string) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		*seen = append(*seen, r.Header.Get("traceparent"))
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestOffMakesNoSpans: with tracing off (no endpoint), a claim, a replay
// and a mismatch make no span at all, even with a recording provider as
// OpenTelemetry's global one and a caller's traceparent, and the log lines
// carry no trace id.
func TestOffMakesNoSpans(t *testing.T) {
	shutdown, err := tracing.Setup(context.Background(), tracing.FromEnv(func(string) string { return "" }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if tracing.On() {
		t.Fatal("tracing is on with no endpoint")
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	s := newServer(t, idempotency.TwoPhase)
	for i, body := range []string{`{"topic":"t","note":"a"}`, `{"topic":"t","note":"a"}`, `{"topic":"t","note":"b"}`} {
		s.create(t, "key-off", body, 300+i)
	}
	if _, err := s.store.Delivery(context.Background(), "alice", "00000000-0000-0000-0000-000000000000"); err == nil {
		t.Fatal("a delivery of no request")
	}
	if !testenv.Eventually(10*time.Second, func() bool { return strings.Count(s.logs.String(), `"msg":"request"`) == 3 }) {
		t.Fatalf("want 3 request log lines:\n%s", s.logs.String())
	}
	if spans := exp.GetSpans(); len(spans) > 0 {
		t.Errorf("tracing off made %d spans: %v", len(spans), names(spans))
	}
	if strings.Contains(s.logs.String(), "trace_id") {
		t.Errorf("tracing off, a log line carries a trace id:\n%s", s.logs.String())
	}
	if _, span := tracing.Start(context.Background(), "x", trace.WithAttributes(attribute.Int("n", 1))); span.IsRecording() {
		t.Error("tracing off, Start made a recording span")
	}
}

// countingProvider counts the tracers asked of it.
type countingProvider struct {
	trace.TracerProvider
	tracers atomic.Int32
}

func (p *countingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	p.tracers.Add(1)
	return p.TracerProvider.Tracer(name, opts...)
}

// TestStartAsksNoTracer: a span is started with the tracer Use asked for
// once, not with one looked up per span (a lock and a map in the SDK, on
// every request).
func TestStartAsksNoTracer(t *testing.T) {
	sdk := sdktrace.NewTracerProvider()
	defer sdk.Shutdown(context.Background())
	p := &countingProvider{TracerProvider: sdk}
	tracing.Use(p)
	defer tracing.Use(nil)
	for range 3 {
		_, span := tracing.Start(context.Background(), "x")
		span.End()
	}
	if n := p.tracers.Load(); n != 1 {
		t.Errorf("three spans asked the provider for %d tracers, want the one of Use", n)
	}
}
