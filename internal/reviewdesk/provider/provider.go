// Package provider is the review desk: a small separate service that the
// demo hands every accepted demo request to. It stands for "another system"
// in the lesson that a local table cannot make a call to another system
// happen exactly once. It deduplicates by its own Idempotency-Key, keeps its
// submissions in its own PostgreSQL database, and has fault knobs so that a
// workshop or a test can make the call slow, failing, lost or refused.
//
//	POST /v1/submissions       Idempotency-Key + {"requestId","topic","note"}: 201 the first time,
//	                           200 + Idempotent-Replayed for the same key again, 422 for the key
//	                           with another payload
//	GET  /v1/submissions/{key} 200 {"state":"accepted"|"cancelled",…} or 404 {"state":"unknown"}
//	POST /v1/submissions/{key}/cancel
//	                           Idempotency-Key (the cancel's own): 201 the first time, 200 +
//	                           Idempotent-Replayed again, 422 for the key with another
//	                           submission or another key for the same one. A cancel may come
//	                           before its submission: it is kept, and cancels it from the start
//	GET  /v1/cancels/{key}     200 {"state":"accepted",…} or 404 {"state":"unknown"}
//	GET|PUT /v1/faults         the fault knobs, when enabled
//	GET  /readyz               200 while its database answers
package provider

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jmoiron/sqlx"
)

// Submission is what a sender submits.
type Submission struct {
	RequestID string `json:"requestId"`
	Topic     string `json:"topic"`
	Note      string `json:"note"`
}

// Faults are the knobs of the desk. The zero value is a healthy desk. Each
// applies to cancels as it does to submissions.
type Faults struct {
	// Delay holds every submissions or status call this long first, e.g. "2s".
	Delay string `json:"delay,omitempty"`
	// FailNext answers the next N submissions or status calls 503, doing nothing.
	FailNext int `json:"failNext,omitempty"`
	// HoldAnswer stores every new submission, then holds its answer this
	// long, e.g. "30s": the sender's crash window between the desk's accept
	// and its own record of it.
	HoldAnswer string `json:"holdAnswer,omitempty"`
	// DropResponses stores the next N new submissions, then closes the
	// connection without an answer: the sender cannot know it was accepted.
	DropResponses int `json:"dropResponses,omitempty"`
	// Refuse answers every new submission 422, a definite refusal, and
	// stores nothing.
	Refuse bool `json:"refuse,omitempty"`
	// Down closes the connection of every submissions or status call at
	// once, doing nothing, as if the desk were gone. /v1/faults still
	// answers, so it can be switched back.
	Down bool `json:"down,omitempty"`
}

// maxBody bounds a request body.
const maxBody = 16 << 10

// Server is the review desk's HTTP handler.
type Server struct {
	store  *store
	logger *slog.Logger
	// faultsEnabled allows /v1/faults; without it the desk is always healthy.
	faultsEnabled bool

	mu     sync.Mutex
	faults Faults
	delay  time.Duration
	hold   time.Duration
}

// NewServer returns the desk on db, which Migrate has prepared.
func NewServer(db *sqlx.DB, logger *slog.Logger, faultsEnabled bool) (*Server, error) {
	st, err := newStore(db)
	if err != nil {
		return nil, err
	}
	return &Server{store: st, logger: logger, faultsEnabled: faultsEnabled}, nil
}

// Handler returns the desk's routes.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.logRequests)
	r.Group(func(r chi.Router) {
		r.Use(s.applyFaults)
		r.Post("/v1/submissions", s.handleSubmit)
		r.Get("/v1/submissions/{key}", s.handleStatus)
		r.Post("/v1/submissions/{key}/cancel", s.handleCancel)
		r.Get("/v1/cancels/{key}", s.handleCancelStatus)
	})
	r.Get("/readyz", s.handleReadyz)
	r.Get("/v1/faults", s.handleGetFaults)
	r.Put("/v1/faults", s.handlePutFaults)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not_found", "no such route")
	})
	return r
}

// handleSubmit is POST /v1/submissions.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || len(r.Header.Values("Idempotency-Key")) > 1 {
		writeProblem(w, http.StatusBadRequest, "idempotency_key_invalid", "send one Idempotency-Key of 1 to 255 characters")
		return
	}
	var sub Submission
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sub); err != nil || sub.RequestID == "" || sub.Topic == "" {
		writeProblem(w, http.StatusBadRequest, "invalid_body", "send {\"requestId\", \"topic\", \"note\"} as JSON, requestId and topic not empty")
		return
	}
	fp := fingerprint(sub)
	if s.current().Refuse {
		if _, known, err := s.store.lookup(r.Context(), key); err != nil {
			s.fail(w, r, err)
			return
		} else if !known {
			writeProblem(w, http.StatusUnprocessableEntity, "submission_refused", "the review desk refuses new submissions now")
			return
		}
	}
	rc, fresh, err := s.store.submit(r.Context(), key, fp, sub)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rc.Fingerprint != fp {
		writeProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for another submission")
		return
	}
	s.answer(w, r, rc, fresh)
}

// answer writes the receipt of a stored submission or cancel, applying
// dropResponses and holdAnswer to a new one.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rc Receipt, fresh bool) {
	if fresh && s.takeDrop() {
		dropConnection(w)
		return
	}
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if fresh && hold > 0 && !pause(r.Context(), hold) {
		return
	}
	status := http.StatusCreated
	if !fresh {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, rc)
}

// handleCancel is POST /v1/submissions/{key}/cancel.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	sub := chi.URLParam(r, "key")
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || len(r.Header.Values("Idempotency-Key")) > 1 {
		writeProblem(w, http.StatusBadRequest, "idempotency_key_invalid", "send one Idempotency-Key of 1 to 255 characters")
		return
	}
	if s.current().Refuse {
		if _, known, err := s.store.lookupCancel(r.Context(), key); err != nil {
			s.fail(w, r, err)
			return
		} else if !known {
			writeProblem(w, http.StatusUnprocessableEntity, "cancel_refused", "the review desk refuses new cancels now")
			return
		}
	}
	rc, fresh, err := s.store.cancel(r.Context(), key, sub)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch {
	case rc.Key != key:
		writeProblem(w, http.StatusUnprocessableEntity, "already_cancelled", "this submission was cancelled under another key")
		return
	case rc.Fingerprint != sub:
		writeProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for the cancel of another submission")
		return
	}
	s.answer(w, r, rc, fresh)
}

// handleCancelStatus is GET /v1/cancels/{key}.
func (s *Server) handleCancelStatus(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "key")
	rc, ok, err := s.store.lookupCancel(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Receipt
		SubmissionKey string `json:"submissionKey"`
		State         string `json:"state"`
	}{rc, rc.Fingerprint, "accepted"})
}

// handleStatus is GET /v1/submissions/{key}.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "key")
	rc, ok, err := s.store.lookup(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		return
	}
	answer := struct {
		Receipt
		State           string `json:"state"`
		CancelReference string `json:"cancelReference,omitempty"`
	}{Receipt: rc, State: "accepted"}
	if c, cancelled, err := s.store.cancelOf(r.Context(), key); err != nil {
		s.fail(w, r, err)
		return
	} else if cancelled {
		answer.State, answer.CancelReference = "cancelled", c.Reference
	}
	writeJSON(w, http.StatusOK, answer)
}

// handleReadyz answers 200 while the desk's database answers.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.db.PingContext(ctx); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk's database does not answer")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleGetFaults(w http.ResponseWriter, r *http.Request) {
	if !s.faultsEnabled {
		writeProblem(w, http.StatusForbidden, "faults_disabled", "start the review desk with PROVIDER_FAULTS=true to use its fault knobs")
		return
	}
	writeJSON(w, http.StatusOK, s.current())
}

// handlePutFaults replaces the whole set of faults; {} clears them.
func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	if !s.faultsEnabled {
		writeProblem(w, http.StatusForbidden, "faults_disabled", "start the review desk with PROVIDER_FAULTS=true to use its fault knobs")
		return
	}
	var f Faults
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_body", "send the faults as JSON: delay, holdAnswer, failNext, dropResponses, refuse, down")
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	s.logger.Info("faults set", "faults", f)
	writeJSON(w, http.StatusOK, f)
}

// SetFaults replaces the faults.
func (s *Server) SetFaults(f Faults) error {
	var d [2]time.Duration
	for i, v := range []string{f.Delay, f.HoldAnswer} {
		var err error
		if d[i], err = time.ParseDuration(cmp.Or(v, "0s")); err != nil || d[i] < 0 || d[i] > time.Minute {
			return fmt.Errorf("delay and holdAnswer must be durations up to 1m, such as 2s")
		}
	}
	if f.FailNext < 0 || f.DropResponses < 0 {
		return fmt.Errorf("failNext and dropResponses must not be negative")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.delay, s.hold = f, d[0], d[1]
	return nil
}

func (s *Server) current() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// takeDrop reports whether this accepted submission's or cancel's answer is to be
// dropped, counting it.
func (s *Server) takeDrop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.DropResponses > 0 {
		s.faults.DropResponses--
		return true
	}
	return false
}

// applyFaults applies down, delay and failNext to the submissions and
// cancels routes.
func (s *Server) applyFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		f, delay := s.faults, s.delay
		fail := f.FailNext > 0
		if fail {
			s.faults.FailNext--
		}
		s.mu.Unlock()
		if f.Down {
			dropConnection(w)
			return
		}
		if delay > 0 && !pause(r.Context(), delay) {
			return
		}
		if fail {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk failed this call (failNext)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.logger.ErrorContext(r.Context(), "review desk", "err", err, "request_id", middleware.GetReqID(r.Context()))
	writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk could not store or read submissions")
}

// logRequests logs one line per request: no bodies, no keys.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		s.logger.Info("request", "request_id", middleware.GetReqID(r.Context()), "method", r.Method,
			"route", chi.RouteContext(r.Context()).RoutePattern(), "status", ww.Status(), "duration", time.Since(start))
	})
}

// fingerprint is the hex SHA-256 of the submission's canonical JSON.
func fingerprint(s Submission) string {
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// pause waits for d, and reports false if the client left first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.Copy(w, &b)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

// String formats the faults for logs.
func (f Faults) String() string {
	return fmt.Sprintf("delay=%s holdAnswer=%s failNext=%d dropResponses=%d refuse=%t down=%t",
		cmp.Or(f.Delay, "0s"), cmp.Or(f.HoldAnswer, "0s"), f.FailNext, f.DropResponses, f.Refuse, f.Down)
}
