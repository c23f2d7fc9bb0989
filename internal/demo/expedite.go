package demo

import (
	"context"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// An expedite is an express review of a demo request, paid at the review
// desk: an operation of several steps. The order is recorded here, an
// express slot is reserved at the desk, the actor's credit is charged there,
// and the order is confirmed here. This package decides the order and its
// answers; the steps, their keys at the desk and their recovery points are
// the transport's (httpapi, expedite.go), and resuming them is the
// idempotency package's.

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

// OrderExpedite decides the order of an express review of the actor's
// request id under the run's key at now: the order to record, and whether
// this key's order is recorded already (nothing left to write). It reads
// the request and any expedite of it; the store's write checks both again
// when it commits.
//
// Errors: not_found; request_not_expeditable (cancelled, or expedited
// already: under another key, or under this one before it expired).
func (s *Service) OrderExpedite(ctx context.Context, expedites ExpediteStore, actor, id, key string, now time.Time) (e Expedite, recorded bool, err error) {
	r, err := s.Get(ctx, actor, id)
	if err != nil {
		return Expedite{}, false, err
	}
	if r.State != StateAccepted {
		return Expedite{}, false, apperr.Errorf(apperr.NotExpeditable, "demo request %s is %s and cannot be expedited", id, r.State)
	}
	switch e, err := expedites.Expedite(ctx, actor, id); {
	case err == nil && e.Key == key && e.State == ExpediteOrdered:
		return e, true, nil
	case err == nil:
		return Expedite{}, false, apperr.Errorf(apperr.NotExpeditable, "demo request %s was already expedited", id)
	case apperr.Code(err) != apperr.NotFound:
		return Expedite{}, false, err
	}
	at := now.UTC().Truncate(time.Microsecond)
	return Expedite{RequestID: id, Key: key, State: ExpediteOrdered, Amount: ExpediteAmount, CreatedAt: at, UpdatedAt: at}, false, nil
}
