package expedite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"time"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
)

// Store keeps the expedites, and the runs of their steps, beside the
// template's store.
type Store struct {
	*runs.Store
}

// NewStore returns the Store on keys' database.
func NewStore(keys *postgres.Store) *Store { return &Store{Store: runs.New(keys)} }

// The business writes of an expedite, an operation of several steps: each
// commits with a recovery point (SaveRun) or with the run's answer
// (FinishRun), and says what it expects to find.
var (
	//go:embed sql/insert_expedite.sql
	insertExpediteSQL string
	//go:embed sql/confirm_expedite.sql
	confirmExpediteSQL string
	//go:embed sql/refuse_expedite.sql
	refuseExpediteSQL string
	//go:embed sql/get_expedite.sql
	getExpediteSQL string
)

// OrderExpedite returns the write of the expedite's first step: the order
// e of actor's request, as decided (sql/insert_expedite.sql).
func (s *Store) OrderExpedite(actor string, e Expedite) idempotency.Effect {
	return runs.Effect("order expedite", insertExpediteSQL, e.RequestID, actor, e.Key, e.Amount, e.CreatedAt)
}

// ConfirmExpedite returns the write that commits with an expedite's answer:
// the order of request id confirmed with the desk's references
// (sql/confirm_expedite.sql).
func (s *Store) ConfirmExpedite(id, slot, charge string, now time.Time) idempotency.Effect {
	return runs.Effect("confirm expedite", confirmExpediteSQL, slot, charge, now, id)
}

// RefuseExpedite returns the write that commits with a refused expedite's
// answer (sql/refuse_expedite.sql).
func (s *Store) RefuseExpedite(id, code string, now time.Time) idempotency.Effect {
	return runs.Effect("refuse expedite", refuseExpediteSQL, code, now, id)
}

// Expedite implements ExpediteStore.
func (s *Store) Expedite(ctx context.Context, actor, id string) (Expedite, error) {
	var e Expedite
	err := s.DB().GetContext(ctx, &e, getExpediteSQL, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return e, apperr.Errorf(apperr.NotFound, "demo request %q has no expedite", id)
	}
	return e, runs.Err(err)
}
