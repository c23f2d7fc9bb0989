package provider

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// followUp is a call that acts, under its own key, on something the desk
// took under another: a cancel of a submission, a release of a slot, a
// refund of a charge. The three share their rules: a key is accepted once,
// for one target; a target takes one follow-up, whatever its key; one may
// come before its target (it is kept, and acts from the start).
type followUp struct {
	resource string // for the fault knobs: cancels, releases, refunds
	target   string // what it acts on, for messages and its answer's field: "submission"
	verb     string // "cancel"
	done     string // "cancelled"
	already  string // the code of another key for the same target
	// take stores the follow-up key of target, or returns the one there.
	take   func(ctx context.Context, key, target string) (rc Receipt, fresh bool, err error)
	lookup func(ctx context.Context, key string) (Receipt, bool, error)
}

// answer is the follow-up rc as the desk answers it, to its POST and its
// status lookup alike.
func (f followUp) answer(rc Receipt) map[string]any {
	return map[string]any{"key": rc.Key, "reference": rc.Reference, "acceptedAt": rc.AcceptedAt,
		f.target + "Key": rc.Fingerprint, "state": "accepted"}
}

// handleFollowUp is the follow-up's POST, as /v1/submissions/{key}/cancel: {key}
// is its target's.
func (s *Server) handleFollowUp(f followUp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		target := chi.URLParam(r, "key")
		key, ok := idempotencyKey(w, r)
		if !ok {
			return
		}
		if s.refused(w, r, f.resource, func(ctx context.Context) (bool, error) {
			_, known, err := f.lookup(ctx, key)
			return known, err
		}) {
			return
		}
		rc, fresh, err := f.take(r.Context(), key, target)
		switch {
		case s.refusedBy(w, r, err):
		case rc.Key != key:
			writeProblem(w, http.StatusUnprocessableEntity, f.already, "this "+f.target+" was "+f.done+" under another key")
		case rc.Fingerprint != target:
			writeProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for the "+f.verb+" of another "+f.target)
		default:
			s.answer(w, r, f.resource, f.answer(rc), fresh)
		}
	}
}

// handleFollowUpStatus is the follow-up's status lookup, as
// GET /v1/cancels/{key}: 200 with its answer, or 404 when the desk never
// took the key.
func (s *Server) handleFollowUpStatus(f followUp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := chi.URLParam(r, "key")
		rc, ok, err := f.lookup(r.Context(), key)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case !ok:
			writeJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		default:
			writeJSON(w, http.StatusOK, f.answer(rc))
		}
	}
}

// followUps are the desk's three: the cancel of a submission, the release
// of a slot, the refund of a charge.
func (s *Server) followUps() (cancel, release, refund followUp) {
	return followUp{resource: resCancels, target: "submission", verb: "cancel", done: "cancelled", already: "already_cancelled",
			take: s.store.cancel, lookup: s.store.lookupCancel},
		followUp{resource: resReleases, target: "slot", verb: "release", done: "released", already: "already_released",
			take: s.store.release, lookup: s.store.lookupRelease},
		followUp{resource: resRefunds, target: "charge", verb: "refund", done: "refunded", already: "already_refunded",
			take: s.store.refund, lookup: s.store.lookupRefund}
}
