package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// The business writes of an expedite, an operation of several steps: each
// commits with a recovery point (SaveRun) or with the run's answer
// (FinishRun), and says what it expects to find.
var (
	insertExpediteSQL  = statement("insert_expedite.sql")
	confirmExpediteSQL = statement("confirm_expedite.sql")
	refuseExpediteSQL  = statement("refuse_expedite.sql")
	getExpediteSQL     = statement("get_expedite.sql")
)

// OrderExpedite returns the write of the expedite's first step: the order
// e of actor's request, as decided (sql/insert_expedite.sql).
func (s *Store) OrderExpedite(actor string, e demo.Expedite) idempotency.Effect {
	return &stepEffect{what: "order expedite", query: insertExpediteSQL,
		args: []any{e.RequestID, actor, e.Key, e.Amount, e.CreatedAt}}
}

// ConfirmExpedite returns the write that commits with an expedite's answer:
// the order of request id confirmed with the desk's references
// (sql/confirm_expedite.sql).
func (s *Store) ConfirmExpedite(id, slot, charge string, now time.Time) idempotency.Effect {
	return &stepEffect{what: "confirm expedite", query: confirmExpediteSQL, args: []any{slot, charge, now, id}}
}

// RefuseExpedite returns the write that commits with a refused expedite's
// answer (sql/refuse_expedite.sql).
func (s *Store) RefuseExpedite(id, code string, now time.Time) idempotency.Effect {
	return &stepEffect{what: "refuse expedite", query: refuseExpediteSQL, args: []any{code, now, id}}
}

// Expedite implements demo.ExpediteStore.
func (s *Store) Expedite(ctx context.Context, actor, id string) (demo.Expedite, error) {
	var e demo.Expedite
	err := s.db.GetContext(ctx, &e, getExpediteSQL, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return e, apperr.Errorf(apperr.NotFound, "demo request %q has no expedite", id)
	}
	return e, dbErr(err)
}
