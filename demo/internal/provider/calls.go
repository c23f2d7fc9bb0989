package provider

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
)

// The desk's calls come in two kinds, each with one POST handler and one
// status lookup for all its resources: a new call (a submission, a slot, a
// charge), and a follow-up of one (a cancel, a release, a refund).

// newCall is a call the desk takes once under the sender's key: the same
// key sent again with the same payload is answered what it took, with
// another payload 422 key_payload_mismatch.
type newCall[In any, Row receipted] struct {
	resource string // for the fault knobs: submissions, slots, charges
	what     string // for messages: "submission"
	valid    func(In) bool
	usage    string // the detail of a 400 for a body that is not valid
	// take stores in under key with its fingerprint fp, or returns what is
	// there; a *refusal is a definite no, with nothing stored.
	take   func(ctx context.Context, key, fp string, in In) (row Row, fresh bool, err error)
	lookup func(ctx context.Context, key string) (Row, bool, error)
}

// receipted is a stored call's row, which embeds its Receipt.
type receipted interface{ receipt() Receipt }

func (r Receipt) receipt() Receipt { return r }

// handleNewCall is the POST of c, as POST /v1/slots.
func handleNewCall[In any, Row receipted](s *Server, c newCall[In, Row]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := idempotencyKey(w, r)
		if !ok {
			return
		}
		var in In
		if err := decodeBody(w, r, &in); err != nil {
			writeBodyError(w, err, c.usage)
			return
		} else if !c.valid(in) {
			writeProblem(w, http.StatusBadRequest, "invalid_body", c.usage)
			return
		}
		fp := fingerprint(in)
		if s.refused(w, r, c.resource, func(ctx context.Context) (bool, error) {
			_, known, err := c.lookup(ctx, key)
			return known, err
		}) {
			return
		}
		row, fresh, err := c.take(r.Context(), key, fp, in)
		switch {
		case s.refusedBy(w, r, err):
		case row.receipt().Fingerprint != fp:
			writeProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for another "+c.what)
		default:
			s.answer(w, r, c.resource, row, fresh)
		}
	}
}

// handleLookup is a status lookup by key, as GET /v1/slots/{key}: 200 with
// what the desk holds, or 404 when it never took the key.
func handleLookup[Row any](s *Server, lookup func(ctx context.Context, key string) (Row, bool, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := chi.URLParam(r, "key")
		row, ok, err := lookup(r.Context(), key)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case !ok:
			writeJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		default:
			writeJSON(w, http.StatusOK, row)
		}
	}
}

// newCalls are the desk's three: a submission, the reserve of a slot, a
// charge.
func (s *Server) newCalls() (newCall[Submission, Receipt], newCall[deskclient.Slot, slotRow], newCall[deskclient.Charge, chargeRow]) {
	return newCall[Submission, Receipt]{resource: resSubmissions, what: "submission",
			valid: func(sub Submission) bool { return sub.RequestID != "" && sub.Topic != "" },
			usage: `send {"requestId", "topic", "note"} as JSON, requestId and topic not empty`,
			take:  s.store.submit, lookup: s.store.lookup},
		newCall[deskclient.Slot, slotRow]{resource: resSlots, what: "slot",
			valid: func(sl deskclient.Slot) bool { return sl.RequestID != "" && sl.Account != "" },
			usage: `send {"requestId", "account"} as JSON, both not empty`,
			take: func(ctx context.Context, key, fp string, sl deskclient.Slot) (slotRow, bool, error) {
				return s.store.reserveSlot(ctx, key, fp, sl, s.opts.SlotHold)
			},
			lookup: s.store.lookupSlot},
		newCall[deskclient.Charge, chargeRow]{resource: resCharges, what: "charge",
			valid: func(c deskclient.Charge) bool {
				return c.RequestID != "" && c.Account != "" && c.SlotKey != "" && c.Amount >= 1 && c.Amount <= maxAmount
			},
			usage: `send {"requestId", "account", "amount", "slotKey"} as JSON, strings not empty, amount from 1 to 1000`,
			take: func(ctx context.Context, key, fp string, c deskclient.Charge) (chargeRow, bool, error) {
				return s.store.charge(ctx, key, fp, c, s.opts.Credit)
			},
			lookup: s.store.lookupCharge}
}

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
// GET /v1/cancels/{key}.
func (s *Server) handleFollowUpStatus(f followUp) http.HandlerFunc {
	return handleLookup(s, func(ctx context.Context, key string) (map[string]any, bool, error) {
		rc, ok, err := f.lookup(ctx, key)
		return f.answer(rc), ok, err
	})
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
