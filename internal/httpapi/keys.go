package httpapi

import (
	"cmp"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// keyOutcome is the body of the outcome route: the key's state as stored,
// never the stored answer itself (that is what a retry with the key gets).
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
	Run                   any        `json:"run,omitempty"` // what the operation keeps beside its key (Route.Outcome)
}

// handleKeyOutcome is GET /v1/idempotency-keys/{key}?operation=… (default:
// the first of ops): what became of the caller's key; it never runs anything.
// A client whose retry budget ran out asks here instead of sending again:
// sending would run the work anew once the key expired, asking cannot.
// An expired record is reported as unknown, as the Runner treats it.
func handleKeyOutcome(logger *slog.Logger, keys idempotency.Store, ttl time.Duration, ops []Route) http.Handler {
	var names []string
	routes := map[string]Route{} // by operation
	for _, o := range ops {
		if o.Operation != "" {
			names = append(names, o.Operation)
			routes[o.Operation] = o
		}
	}
	return handleRead(logger, func(r *http.Request) (keyOutcome, error) {
		op := cmp.Or(r.URL.Query().Get("operation"), names[0])
		if _, ok := routes[op]; !ok {
			return keyOutcome{}, apperr.Errorf(apperr.InvalidQuery, "operation must be one of %s", strings.Join(names, ", "))
		}
		raw := chi.URLParam(r, "key")
		if r.URL.RawPath != "" { // chi routed the escaped path, which net/http checked: decode the key once
			raw, _ = url.PathUnescape(raw)
		}
		key, err := idempotency.ParseKey([]string{raw})
		if err != nil {
			return keyOutcome{}, err
		}
		scope := idempotency.Scope{Actor: ActorOf(r), Operation: op, Key: key}
		accesslog.NoteKey(r, scope)
		rec, now, err := keys.Lookup(r.Context(), scope)
		if err != nil {
			return keyOutcome{}, err
		}
		if rec == nil || rec.Expired(now) {
			return keyOutcome{}, apperr.Errorf(apperr.NotFound, "this key was never seen, or its record expired")
		}
		out := keyOutcome{Key: key, Operation: op, State: string(rec.State), CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}
		switch {
		case rec.State == idempotency.StateCompleted:
			out.Status, out.ResultID, out.CompletedAt = rec.Response.Status, rec.Response.ResultID, &rec.CompletedAt
		// An in-progress key shows how long its owner's lease has left: after
		// that, a retry with the same payload takes the key over.
		case rec.LeaseUntil.Sub(now) > ttl: // held longer than any key is kept: no countdown
		default:
			left := int(math.Ceil(max(rec.LeaseUntil.Sub(now), 0).Seconds()))
			out.LeaseRemainingSeconds = &left
		}
		if more := routes[op].Outcome; more != nil {
			out.Run, err = more(r.Context(), scope)
		}
		return out, err
	})
}
