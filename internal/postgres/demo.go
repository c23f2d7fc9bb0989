package postgres

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// Each operation's change has two texts, one a path. The one-phase statement writes
// the key already completed, its answer stored, and from that row the business row
// and its outbox event: one statement, one commit, so the answer and the change exist
// together or not at all, and a concurrent duplicate waits on the key's unique index
// and then replays. The finish is the two-phase path's end: the same writes, fenced by
// the claim's token, so an owner whose lease was taken over changes nothing.
var (
	//go:embed sql/create_demo_request.sql
	createSQL string
	//go:embed sql/cancel_demo_request.sql
	cancelSQL string
)

//go:embed sql/get_demo_request.sql
var getDemoRequestSQL string

// CreateDemoRequest is the create's write of r, committed with the key: the business
// row exists exactly when the key holds the 201 that names it.
func (s *Store) CreateDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "create demo request", stmt: createSQL, args: []any{r.ID, r.State, r.Topic, r.Note, r.CreatedAt}}
}

// CancelDemoRequest is the cancel's write of r, committed with the key
// (sql/cancel_demo_request.sql). It was decided on a read, and the statement
// checks that the row is still as read (else ErrEffectNotApplied, and the
// Runner decides again on a fresh read).
func (s *Store) CancelDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "cancel demo request", stmt: cancelSQL, args: []any{r.State, r.CancelledAt, r.ID}}
}

// DemoRequest implements demo.Store: the actor's own request, or not_found (another
// actor's id is not found either, so ids tell nothing of other actors).
func (s *Store) DemoRequest(ctx context.Context, actor, id string) (demo.Request, error) {
	var r demo.Request
	ctx, end := watch(ctx, s.db)
	err := end(s.db.GetContext(ctx, &r, getDemoRequestSQL, id, actor))
	if errors.Is(err, sql.ErrNoRows) {
		return r, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, dbErr(err)
}
