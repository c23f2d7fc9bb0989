// Package expedite is the full demo's operation of several steps: an express
// review of a demo request, paid for at the review desk (POST
// /v1/demo-requests/{id}/expedite), run by package steps, with its rule
// against a cancel of the same request.
package expedite

import (
	"context"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
)

// The refusals of an expedite, and of a cancel that meets one.
var (
	BeingExpedited = apperr.Define("request_being_expedited", 422, "Request is being expedited",
		"The demo request has an expedite whose steps are not finished (its slot or charge may be at the review desk right now), so it cannot be cancelled. The refusal is stored, and a retry with the same key gets it again; once the expedite is refused, a cancel under a new key may go ahead. An expedited request cannot be cancelled.")
	NotExpeditable = apperr.Define("request_not_expeditable", 422, "Request cannot be expedited",
		"The demo request is cancelled, or another key already expedited it. The refusal is stored, and a retry with the same key gets it again.")
	Refused = apperr.Define("expedite_refused", 422, "Expedite refused by the review desk",
		"The review desk refused the express slot or the charge. What the run had reserved at the desk was released before this answer was stored; a retry with the same key gets it again.")
)

// ExpediteAmount is the price of an express review, in the desk's credits.
const ExpediteAmount = 10

// States of an expedite.
const (
	ExpediteOrdered   = "ordered"   // recorded; the desk's steps run
	ExpediteConfirmed = "confirmed" // slot reserved and charged
	ExpediteRefused   = "refused"   // the desk refused; what was reserved is released
)

// Expedite is the order of an express review of a request.
type Expedite struct {
	RequestID       string    `json:"requestId" db:"request_id"`
	Key             string    `json:"-" db:"idem_key"`
	State           string    `json:"state" db:"state"`
	Amount          int       `json:"amount" db:"amount"`
	SlotReference   string    `json:"slotReference,omitempty" db:"slot_reference"`
	ChargeReference string    `json:"chargeReference,omitempty" db:"charge_reference"`
	RefusalCode     string    `json:"refusalCode,omitempty" db:"refusal_code"`
	CreatedAt       time.Time `json:"createdAt" db:"created_at"`
	UpdatedAt       time.Time `json:"updatedAt" db:"updated_at"`
}

// ExpediteStore reads expedites.
type ExpediteStore interface {
	// Expedite returns the expedite of the actor's request id. Errors:
	// not_found.
	Expedite(ctx context.Context, actor, id string) (Expedite, error)
}

// Order decides the order of an express review of the actor's
// request id under the run's key at now: the order to record, and whether
// this key's order is recorded already (nothing left to write). It reads
// the request and any expedite of it; the store's write checks both again
// when it commits.
//
// Errors: not_found; request_not_expeditable (cancelled, or expedited
// already: under another key, or under this one before it expired).
func Order(ctx context.Context, s *demo.Service, expedites ExpediteStore, actor, id, key string, now time.Time) (e Expedite, recorded bool, err error) {
	r, err := s.Get(ctx, actor, id)
	if err != nil {
		return Expedite{}, false, err
	}
	if r.State != demo.StateAccepted {
		return Expedite{}, false, apperr.Errorf(NotExpeditable, "demo request %s is %s and cannot be expedited", id, r.State)
	}
	switch e, err := expedites.Expedite(ctx, actor, id); {
	case err == nil && e.Key == key && e.State == ExpediteOrdered:
		return e, true, nil
	case err == nil:
		return Expedite{}, false, apperr.Errorf(NotExpeditable, "demo request %s was already expedited", id)
	case apperr.Code(err) != apperr.NotFound:
		return Expedite{}, false, err
	}
	at := now.UTC().Truncate(time.Microsecond)
	return Expedite{RequestID: id, Key: key, State: ExpediteOrdered, Amount: ExpediteAmount, CreatedAt: at, UpdatedAt: at}, false, nil
}

// Service is the template's demo.Service with the rule between a cancel
// and an expedite: a cancelled request never keeps a charge, so the cancel
// of a request with an expedite is refused while the expedite is unfinished
// (request_being_expedited: its steps may be at the desk right now; a new
// cancel may go ahead once it is refused) and once it is confirmed
// (request_not_cancellable: the express review is paid for). The database
// holds the same rule when the cancel commits (migration 000001 of the
// demo): whichever commits first on the request's row wins.
type Service struct {
	*demo.Service
	Expedites ExpediteStore
}

// Cancel is demo.Service.Cancel under the rule. Errors: those of
// demo.Service.Cancel, request_being_expedited, request_not_cancellable.
func (s Service) Cancel(ctx context.Context, actor, id string, now time.Time) (demo.Request, error) {
	r, err := s.Service.Cancel(ctx, actor, id, now)
	if err != nil {
		return demo.Request{}, err
	}
	e, err := s.Expedites.Expedite(ctx, actor, id)
	switch {
	case apperr.Code(err) == apperr.NotFound:
		return r, nil
	case err != nil:
		return demo.Request{}, err
	case e.State == ExpediteOrdered:
		return demo.Request{}, apperr.Errorf(BeingExpedited,
			"demo request %s is being expedited; it can be cancelled, under a new key, only if the expedite is refused", id)
	case e.State == ExpediteConfirmed:
		return demo.Request{}, apperr.Errorf(apperr.NotCancellable, "demo request %s is expedited (paid for) and cannot be cancelled", id)
	}
	return r, nil
}
