package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/metrics"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/serving"
)

// baselineCommand, as the first argument, makes demo-bench the baseline
// server instead of the load generator: the bench starts itself that way, so
// the baseline runs in a process of its own like demo-api serve.
const baselineCommand = "baseline-server"

// The baseline server answers POST /v1/demo-requests like demo-api serve
// does, built from the same pieces, without the idempotency layer: no key,
// fingerprint, claim, stored response or finish. What differs between a
// baseline request and a create is what that layer costs:
//
//   - the same chi middleware, in the same order: request id, one JSON log
//     line per request and its latency in the same Prometheus histogram,
//     panic recovery, then bearer authentication (internal/auth);
//   - the same body rules: application/json, at most 64 KiB, known fields
//     only, then demo.CreateInput.Validate;
//   - the same connection settings (postgres.Open: binary parameters, a pool
//     of 32) and one prepared INSERT of the business row, as the store
//     prepares its statements;
//   - the same answer: 201, Location, and the demo.Request as JSON.
//
// Its decoding is encoding/json's strict decoder rather than the API's,
// which also walks the members once to refuse duplicates and nulls: the
// baseline is, if anything, slightly cheaper than an API without the layer.
const (
	baselineMaxBody = 64 << 10 // httpapi.MaxBodyBytes

	baselineInsertSQL = `INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
VALUES ($1::uuid, $2, $3, $4, $5, now())
RETURNING created_at`

	// baselineEffectSQL is the whole business effect of a create without the
	// idempotency layer: the request and, FROM it, its outbox row, in one
	// statement as the service writes them (BASELINE_OUTBOX=true).
	baselineEffectSQL = `WITH request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    VALUES ($1::uuid, $2, $3, $4, $5, now())
    RETURNING id, created_at
), effect AS (
    INSERT INTO outbox (request_id, next_attempt_at, created_at, updated_at)
    SELECT id, created_at, created_at, created_at FROM request
)
SELECT created_at FROM request`
)

// serveBaseline runs the baseline server until ctx ends. It reads
// DATABASE_URL, LISTEN_ADDR, API_TOKENS and BASELINE_OUTBOX (true: each
// request also writes its outbox row), logs to stderr and prints
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
	query := baselineInsertSQL
	if getenv("BASELINE_OUTBOX") == "true" {
		query = baselineEffectSQL
	}
	insert, err := db.PreparexContext(ctx, query)
	if err != nil {
		return fmt.Errorf("prepare the baseline insert: %w", err)
	}
	defer insert.Close()
	handler := baselineHandler(logger, db, insert, tokens)

	ln, err := net.Listen("tcp", getenv("LISTEN_ADDR"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := serving.NewServer(handler, logger, 30*time.Second) // as demo-api serve's
	fmt.Fprintf(stdout, "baseline listening on http://%s\n", ln.Addr())
	return serving.Serve(ctx, logger, srv, ln, 10*time.Second)
}

// baselineHandler is the baseline server's whole surface: POST
// /v1/demo-requests, /healthz and /readyz.
func baselineHandler(logger *slog.Logger, db *sqlx.DB, insert *sqlx.Stmt, tokens auth.Tokens) http.Handler {
	m := metrics.New(noClaims{}, logger)
	r := chi.NewRouter()
	r.Use(middleware.RequestID, logBaselineRequests(logger, m), recoverBaseline(logger))
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeBaselineJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := db.PingContext(r.Context()); err != nil {
			baselineProblem(w, r, http.StatusServiceUnavailable, apperr.Unavailable, "the database does not answer")
			return
		}
		writeBaselineJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	r.Group(func(r chi.Router) {
		r.Use(authenticateBaseline(tokens))
		r.Method(http.MethodPost, "/v1/demo-requests", handleBaselineCreate(logger, insert))
	})
	return r
}

// handleBaselineCreate decodes and validates a create body, inserts the
// demo request and answers 201 with it.
func handleBaselineCreate(logger *slog.Logger, insert *sqlx.Stmt) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := decodeBaselineInput(w, r)
		if err != nil {
			status := http.StatusBadRequest
			switch apperr.Code(err) {
			case apperr.UnsupportedMediaType:
				status = http.StatusUnsupportedMediaType
			case apperr.BodyTooLarge:
				status = http.StatusRequestEntityTooLarge
			}
			baselineProblem(w, r, status, apperr.Code(err), err.Error())
			return
		}
		dr := demo.Request{ID: uuid.NewString(), Actor: actorOf(r), State: demo.StateAccepted, Topic: in.Topic, Note: in.Note}
		if err := insert.QueryRowxContext(r.Context(), dr.ID, dr.Actor, dr.State, dr.Topic, dr.Note).Scan(&dr.CreatedAt); err != nil {
			logger.ErrorContext(r.Context(), "request failed", "err", err, "request_id", middleware.GetReqID(r.Context()))
			baselineProblem(w, r, http.StatusInternalServerError, apperr.Internal, "something went wrong on our side")
			return
		}
		body, err := json.Marshal(dr)
		if err != nil {
			baselineProblem(w, r, http.StatusInternalServerError, apperr.Internal, "something went wrong on our side")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/demo-requests/"+url.PathEscape(dr.ID))
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
}

// decodeBaselineInput reads one JSON object of known fields, as the API
// does, and validates it.
func decodeBaselineInput(w http.ResponseWriter, r *http.Request) (demo.CreateInput, error) {
	var in demo.CreateInput
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return in, apperr.Errorf(apperr.UnsupportedMediaType, "send the body as Content-Type: application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, baselineMaxBody))
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		return in, apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", baselineMaxBody)
	} else if err != nil {
		return in, apperr.Errorf(apperr.MalformedJSON, "the body could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, apperr.Errorf(apperr.MalformedJSON, "the body is not a create: %v", err)
	}
	if dec.More() {
		return in, apperr.Errorf(apperr.MalformedJSON, "the body holds more than one JSON value")
	}
	return in, in.Validate()
}

// baselineCtxKey is the type of the baseline server's context keys.
type baselineCtxKey int

const (
	baselineActorKey baselineCtxKey = iota
	baselineLogKey
)

func actorOf(r *http.Request) string {
	actor, _ := r.Context().Value(baselineActorKey).(string)
	return actor
}

// logBaselineRequests logs one line per request and observes its latency,
// as the API's request logger does.
func logBaselineRequests(logger *slog.Logger, m *metrics.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			actor := new(string)
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), baselineLogKey, actor)))

			d := time.Since(start)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			attrs := []slog.Attr{
				slog.String("request_id", middleware.GetReqID(r.Context())),
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Duration("duration", d),
			}
			if *actor != "" {
				attrs = append(attrs, slog.String("actor", *actor))
			}
			logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
			m.Request(route, strconv.Itoa(status), d)
		})
	}
}

// recoverBaseline turns a panic into a logged 500.
func recoverBaseline(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					logger.ErrorContext(r.Context(), "panic", "panic", v)
					baselineProblem(w, r, http.StatusInternalServerError, apperr.Internal, "something went wrong on our side")
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// authenticateBaseline resolves the bearer token to an actor, or answers 401.
func authenticateBaseline(tokens auth.Tokens) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			actor, ok := tokens.Actor(strings.TrimSpace(token))
			if !strings.EqualFold(scheme, "Bearer") || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="demo-api"`)
				baselineProblem(w, r, http.StatusUnauthorized, apperr.Unauthorized, "send Authorization: Bearer <token> with a known token")
				return
			}
			if p, ok := r.Context().Value(baselineLogKey).(*string); ok {
				*p = actor
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), baselineActorKey, actor)))
		})
	}
}

// baselineProblem answers a problem+json with a machine code. The bench
// sends only valid requests; this is for a person who tries the server.
func baselineProblem(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	body, _ := json.Marshal(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail, "code": code})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(body)
}

func writeBaselineJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// noClaims stands for the claim counter of the metrics: the baseline has no
// claims, and nobody scrapes it.
type noClaims struct{}

func (noClaims) InProgress(context.Context) (int, time.Time, time.Time, error) {
	return 0, time.Time{}, time.Time{}, nil
}
