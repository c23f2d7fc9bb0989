package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

var (
	createSQL = statement("create_demo_request.sql")
	cancelSQL = statement("cancel_demo_request.sql")
)

var getDemoRequestSQL = statement("get_demo_request.sql")

// CreateDemoRequest is the create's write of r, committed with the key.
func (s *Store) CreateDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "create demo request", stmt: createSQL, args: []any{r.ID, r.State, r.Topic, r.Note, r.CreatedAt}}
}

// CancelDemoRequest is the cancel's write of r, committed with the key
// (sql/cancel_demo_request.sql); conditional: it was decided on a read.
func (s *Store) CancelDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "cancel demo request", stmt: cancelSQL, args: []any{r.State, r.CancelledAt, r.ID}, conditional: true}
}

// DemoRequest implements demo.Store.
func (s *Store) DemoRequest(ctx context.Context, actor, id string) (demo.Request, error) {
	var r demo.Request
	err := await(ctx, s.db, func(ctx context.Context) error { return s.db.GetContext(ctx, &r, getDemoRequestSQL, id, actor) })
	if errors.Is(err, sql.ErrNoRows) {
		return r, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, dbErr(err)
}
