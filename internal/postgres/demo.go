package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// createDemoRequestSQL inserts the business row of a create with its finish.
var createDemoRequestSQL = finishSQL(`INSERT INTO demo_requests (id, actor_id, state, topic, note, created_at)
    SELECT $1::uuid, $2, $3, $4, $5, $6::timestamptz FROM fenced`, 6)

// CreateDemoRequest implements demo.Store: the business row and the finish of
// the key commit in one statement, fenced by the claim token.
func (s *Store) CreateDemoRequest(ctx context.Context, c idempotency.Claim, r demo.Request, resp idempotency.Response) error {
	return s.finish(ctx, createDemoRequestSQL, c, resp, r.ID, r.Actor, r.State, r.Topic, r.Note, r.CreatedAt)
}

// DemoRequest implements demo.Store.
func (s *Store) DemoRequest(ctx context.Context, actor, id string) (demo.Request, error) {
	var r demo.Request
	err := s.db.GetContext(ctx, &r, `
SELECT id, actor_id, state, topic, note, created_at
FROM demo_requests WHERE id = $1 AND actor_id = $2`, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return r, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, dbErr(err)
}
