package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// The business writes. Each selects FROM finished, the key row its statement
// completed, so it happens exactly when the key is completed with its
// answer; the last CTE is named effect.

// insertDemoRequest is the effect of a create: the request, and FROM it the
// outbox row that hands it to the review desk (package delivery), due at
// once. Nothing calls the desk inside the request.
var insertDemoRequest = newKeyStatements(`
request AS (
    INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT CAST(:id AS uuid), :actor, :state, :topic, :note, CAST(:created_at AS timestamptz)
    FROM finished
    RETURNING id, created_at
), effect AS (
    INSERT INTO outbox (request_id, next_attempt_at, created_at, updated_at)
    SELECT id, created_at, created_at, created_at
    FROM request
    RETURNING request_id
)`)

// cancelDemoRequest is the effect of a cancel. The work decided it on a
// read, so the write says what it expects to find (still accepted); if
// another request cancelled it meanwhile, it changes nothing and the
// transaction rolls back (idempotency.ErrEffectNotApplied).
var cancelDemoRequest = newKeyStatements(`
effect AS (
    UPDATE demo_requests SET state = :state, cancelled_at = CAST(:cancelled_at AS timestamptz)
    FROM finished
    WHERE id = CAST(:id AS uuid) AND actor_id = :actor AND state = 'accepted'
    RETURNING id
)`)

// InsertDemoRequest returns the write that creates r with its key.
func (s *Store) InsertDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "insert demo request", stmts: &insertDemoRequest, args: map[string]any{
		"id": r.ID, "state": r.State, "topic": r.Topic, "note": r.Note, "created_at": r.CreatedAt,
	}}
}

// CancelDemoRequest returns the write that cancels r (as the work decided
// it) with its key.
func (s *Store) CancelDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "cancel demo request", stmts: &cancelDemoRequest, conditional: true, args: map[string]any{
		"id": r.ID, "state": r.State, "cancelled_at": r.CancelledAt,
	}}
}

// DemoRequest implements demo.Store.
func (s *Store) DemoRequest(ctx context.Context, actor, id string) (demo.Request, error) {
	var r demo.Request
	err := s.db.GetContext(ctx, &r, `
SELECT r.id, r.actor_id, r.state, r.topic, r.note, r.created_at, r.cancelled_at, coalesce(o.state::text, '') AS delivery
FROM demo_requests r LEFT JOIN outbox o ON o.request_id = r.id
WHERE r.id = $1 AND r.actor_id = $2`, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return r, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, dbErr(err)
}
