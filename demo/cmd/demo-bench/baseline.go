package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/demo-api/demo-api/demo/internal/profiler"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/serving"
)

// baselineCommand, as the first argument, makes demo-bench the baseline
// server instead of the load generator: the bench starts itself that way, so
// the baseline runs in a process of its own like demo-api serve.
const baselineCommand = "baseline-server"

// The baseline server is the API's own server (httpapi.NewServer: its
// middleware, authentication, /readyz and /metrics) whose POST
// /v1/demo-requests is the create without the idempotency layer: no key,
// fingerprint, claim, stored response or finish. What differs between a
// baseline request and a create is what that layer costs:
//
//   - the same middleware and authentication: the server is the API's;
//   - the same decoding (body.DecodeJSON, then the input's Validate),
//     decision (demo.Service.Create) and answer (the request as JSON, with
//     its Location), made of the pieces any route of a service uses;
//   - the same connection settings (postgres.Open: binary parameters, a pool
//     of 32) and one prepared INSERT of the business row, as the store
//     prepares its statements;
//   - the same HTTP server, started and stopped by package serving.
//
// The route is one of Deps.Routes with the create's method and pattern: it
// is registered after the API's operations, and chi keeps the last handler
// of a method and pattern, so it takes the idempotent create's place
// (TestBaselineServer checks that no key is needed and none is stored).
const (
	baselineInsertSQL = `INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
VALUES ($1::uuid, $2, $3, $4, $5, $6)`

	// baselineEffectSQL is the whole business effect of a create without the
	// idempotency layer: the request and, FROM it, its outbox row, in one
	// statement as the service writes them (BASELINE_OUTBOX=true).
	baselineEffectSQL = `WITH request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    VALUES ($1::uuid, $2, $3, $4, $5, $6)
    RETURNING id, actor_id, created_at
)
INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
SELECT id, actor_id, created_at, created_at, created_at FROM request`

	// baselineKeySQL is what a create must write, with nothing around it:
	// the key row completed with its answer (a plain INSERT, no function),
	// then the business effect where it wrote, in one statement
	// (BASELINE_KEY=true). A create costs this much at least; what it costs
	// beyond is the layer's machinery: the key's parse and fingerprint, the
	// Runner, write_key's function, the answer kept for a replay.
	baselineKeySQL = `WITH k AS (
    INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token,
        status_code, response_body, response_headers, result_id, created_at, completed_at, expires_at)
    VALUES ($2, 'create_demo_request', $1, $7, 'completed', $1::text::uuid,
        201, $8, $9, $1, $6::timestamptz, $6::timestamptz, $6::timestamptz + interval '1 day')
    ON CONFLICT DO NOTHING
    RETURNING 1
), request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT $1::text::uuid, $2, $3, $4, $5, $6::timestamptz FROM k
    RETURNING id, actor_id, created_at
)
INSERT INTO outbox (request_id, actor_id, next_attempt_at, created_at, updated_at)
SELECT id, actor_id, created_at, created_at, created_at FROM request`
)

// serveBaseline runs the baseline server until ctx ends. It reads
// DATABASE_URL, LISTEN_ADDR, API_TOKENS, BASELINE_OUTBOX (true: each
// request also writes its outbox row), BASELINE_KEY (true: and, first, its
// key row with the answer) and PPROF_ADDR (as serve's), logs to stderr and prints
// "baseline listening on http://ADDR" to stdout once it listens.
func serveBaseline(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	tokens, err := auth.Parse(getenv("API_TOKENS"))
	if err != nil {
		return fmt.Errorf("API_TOKENS: %w", err)
	}
	db, err := postgres.Open(ctx, getenv("DATABASE_URL"), postgres.KeyStatements)
	if err != nil {
		return err
	}
	defer db.Close()
	query, keyed := baselineInsertSQL, getenv("BASELINE_KEY") == "true"
	switch {
	case keyed:
		query = baselineKeySQL
	case getenv("BASELINE_OUTBOX") == "true":
		query = baselineEffectSQL
	}
	stmt, err := db.PreparexContext(ctx, query)
	if err != nil {
		return fmt.Errorf("prepare the baseline insert: %w", err)
	}
	defer stmt.Close()
	insert := func(ctx context.Context, dr demo.Request, answer []byte, header http.Header) error {
		args := []any{dr.ID, dr.Actor, dr.State, dr.Topic, dr.Note, dr.CreatedAt}
		if keyed {
			// The key row holds what a create's does: a fingerprint, the
			// answer's bytes and its headers (the request's id stands for
			// the key, a fresh one every time).
			headers, err := json.Marshal(header)
			if err != nil {
				return err
			}
			fp := sha256.Sum256(answer)
			args = append(args, hex.EncodeToString(fp[:]), answer, string(headers))
		}
		_, err := stmt.ExecContext(ctx, args...)
		return err
	}
	store := postgres.New(db)
	svc := &demo.Service{}
	handler, err := httpapi.NewServer(httpapi.Deps{
		Logger:  logger,
		Keys:    store,
		Demo:    svc,
		Writes:  store,
		Tokens:  tokens,
		Ready:   db.PingContext,
		TTL:     24 * time.Hour,
		Lease:   30 * time.Second,
		Metrics: metrics.New(noClaims{}, logger),
		Routes: func(*httpapi.Server) ([]httpapi.Route, error) {
			return []httpapi.Route{{Method: http.MethodPost, Pattern: "/v1/demo-requests", Handler: createWithoutKey(logger, svc, insert)}}, nil
		},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", getenv("LISTEN_ADDR"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := serving.NewServer(handler, logger, 30*time.Second) // demo-api serve's default
	fmt.Fprintf(stdout, "baseline listening on http://%s\n", ln.Addr())
	if addr := getenv("PPROF_ADDR"); addr != "" { // as demo-api serve's
		pln, err := profiler.Listen(addr)
		if err != nil {
			return err
		}
		profiler.Announce(stdout, "baseline", pln)
		go profiler.Serve(ctx, logger, pln)
	}
	return serving.Serve(ctx, logger, srv, ln, 10*time.Second)
}

// createWithoutKey is POST /v1/demo-requests without the idempotency
// layer: decode, decide now, render the answer once, insert, send it.
func createWithoutKey(logger *slog.Logger, svc *demo.Service, insert func(context.Context, demo.Request, []byte, http.Header) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in demo.CreateInput
		err := body.DecodeJSON(w, r, &in)
		if err == nil {
			err = in.Validate()
		}
		var dr demo.Request
		if err == nil {
			dr, err = svc.Create(httpapi.ActorOf(r), in, time.Now())
		}
		var answer []byte
		if err == nil {
			answer, err = json.Marshal(dr)
		}
		header := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/demo-requests/" + url.PathEscape(dr.ID)}}
		if err == nil {
			err = insert(r.Context(), dr, answer, header)
		}
		if err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(http.StatusCreated)
		w.Write(answer)
	})
}

// noClaims stands for the claim counter of the metrics: the baseline has no
// claims.
type noClaims struct{}

func (noClaims) InProgress(context.Context) (int, time.Time, time.Time, error) {
	return 0, time.Time{}, time.Time{}, nil
}
