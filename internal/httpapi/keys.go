package httpapi

import (
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// keyNeedsAttention is the outcome route's state of a key whose run needs
// attention.
const keyNeedsAttention = "needs_attention"

// keyOutcome is the body of the outcome route.
type keyOutcome struct {
	Key                   string     `json:"key"`
	Operation             string     `json:"operation"`
	State                 string     `json:"state"`
	LeaseRemainingSeconds *int       `json:"leaseRemainingSeconds,omitempty"`
	Status                int        `json:"status,omitempty"`
	ResultID              string     `json:"resultId,omitempty"`
	CreatedAt             time.Time  `json:"createdAt"`
	CompletedAt           *time.Time `json:"completedAt,omitempty"`
	ExpiresAt             time.Time  `json:"expiresAt"`
	// Run is the run of an operation of several steps: where it stands.
	Run *runOutcome `json:"run,omitempty"`
}

// runOutcome is what the outcome route shows of a run.
type runOutcome struct {
	RecoveryPoint string            `json:"recoveryPoint"`
	State         string            `json:"state"`
	References    map[string]string `json:"references"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"lastError,omitempty"`
}

// handleKeyOutcome is GET /v1/idempotency-keys/{key}?operation=…: what became
// of the caller's key, for a client whose retries ran out. It never runs
// anything. An unknown or expired key is 404. The operation defaults to the
// first of the table (the create).
func handleKeyOutcome(logger *slog.Logger, keys idempotency.Store, ops []route) http.Handler {
	var names []string
	stepWise := map[string]bool{}
	for _, o := range ops {
		names = append(names, o.operation)
		stepWise[o.operation] = o.stepWise
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.URL.Query().Get("operation")
		if op == "" {
			op = names[0]
		}
		if !slices.Contains(names, op) {
			writeError(logger, w, r, apperr.Errorf(apperr.InvalidQuery, "operation must be one of %s", strings.Join(names, ", ")))
			return
		}
		raw := chi.URLParam(r, "key")
		if r.URL.RawPath != "" { // chi routed the escaped path: decode the key once
			var err error
			if raw, err = url.PathUnescape(raw); err != nil {
				writeError(logger, w, r, apperr.Errorf(apperr.KeyInvalid, "the key in the path is not valid percent-encoding"))
				return
			}
		}
		key, err := idempotency.ParseKey([]string{raw})
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		scope := idempotency.Scope{Actor: actorOf(r), Operation: op, Key: key}
		noteKey(r, scope)
		rec, now, err := keys.Lookup(r.Context(), scope)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		if rec == nil || rec.Expired(now) {
			writeError(logger, w, r, apperr.Errorf(apperr.NotFound, "this key was never seen, or its record expired"))
			return
		}
		out := keyOutcome{Key: key, Operation: op, State: string(rec.State), CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}
		if rec.State == idempotency.InProgress {
			left := int(math.Ceil(max(rec.LeaseUntil.Sub(now), 0).Seconds()))
			out.LeaseRemainingSeconds = &left
		} else {
			out.Status, out.ResultID, out.CompletedAt = rec.Response.Status, rec.Response.ResultID, &rec.CompletedAt
		}
		if runs, ok := keys.(idempotency.RunStore); ok && stepWise[op] {
			run, err := runs.LoadRun(r.Context(), scope)
			if err != nil {
				writeError(logger, w, r, err)
				return
			}
			if run != nil {
				out.Run = &runOutcome{RecoveryPoint: run.Point, State: string(run.State), References: run.Refs,
					Attempts: run.Attempts, LastError: run.LastError}
			}
			if run != nil && run.State == idempotency.RunNeedsAttention && rec.State == idempotency.InProgress {
				// No owner works on it and no lease will pass: only an
				// operator moves it (docs/steps.md).
				out.State, out.LeaseRemainingSeconds = keyNeedsAttention, nil
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
}
