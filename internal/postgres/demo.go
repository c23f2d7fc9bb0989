package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// The business writes: the statements of each effect, one file per path.
// Each writes FROM finished, the key row its statement completed, so it
// happens exactly when the key is completed with its answer.

// createDemoRequest is the effect of a create: the request, and FROM it the
// outbox row that hands it to the review desk (package delivery), due at
// once. Nothing calls the desk inside the request. Its statements are
// written whole, not composed: the one-phase create is the benchmarked
// path, its final SELECT shaped for speed.
var createDemoRequest = keyStatements{
	onePhase: writeStatements{free: statement("create_demo_request.sql"), takeOver: statement("create_demo_request_takeover.sql")},
	finish:   statement("finish_claim_create_demo_request.sql"),
}

// cancelDemoRequest is the effect of a cancel, composed with the key's
// statements (compose.go). The work decided it on a read, so the write
// says what it expects to find (still accepted); if another request
// cancelled it meanwhile, it changes nothing and the transaction rolls
// back (idempotency.ErrEffectNotApplied).
var cancelDemoRequest = composed("cancel_demo_request.sql")

var getDemoRequestSQL = statement("get_demo_request.sql")

// InsertDemoRequest returns the write that creates r with its key. Its
// arguments follow the key's in its files ($12 on in create_demo_request.sql).
func (s *Store) InsertDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "insert demo request", stmts: &createDemoRequest,
		args: []any{r.ID, r.State, r.Topic, r.Note, r.CreatedAt}}
}

// CancelDemoRequest returns the write that cancels r (as the work decided
// it) with its key. Its arguments are the effect's own, in the order of
// sql/effect/cancel_demo_request.sql (:1 on).
func (s *Store) CancelDemoRequest(r demo.Request) idempotency.Effect {
	return &effect{what: "cancel demo request", stmts: &cancelDemoRequest, conditional: true,
		args: []any{r.State, r.CancelledAt, r.ID}}
}

// DemoRequest implements demo.Store.
func (s *Store) DemoRequest(ctx context.Context, actor, id string) (demo.Request, error) {
	var r demo.Request
	err := s.db.GetContext(ctx, &r, getDemoRequestSQL, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return r, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, dbErr(err)
}
