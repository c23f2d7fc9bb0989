package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// The business writes: each effect's statements, one per path. Each writes
// FROM finished, the key row its statement completed, so it happens exactly
// when the key is completed with its answer. Each has a constructor below
// (CreateDemoRequest), which an operation's Effect calls.

// effectStatements are an effect's statements, and whether the work
// decided it on a read (conditional): then a write that finds its row
// changed since changes nothing, and the transaction rolls back
// (idempotency.ErrEffectNotApplied), so the work decides afresh.
type effectStatements struct {
	stmts       keyStatements
	conditional bool
}

// createDemoRequest is the file of the create's effect: the request, and
// FROM it the outbox row that hands it to the review desk (package
// delivery), due at once. Nothing calls the desk inside the request.
const createDemoRequest = "create_demo_request.sql"

// effects are the business writes by the name an operation gives: every
// file of sql/effect/, composed with the key's statements (compose.go), and
// the create, whose statements are written whole, not composed: the
// one-phase create is the benchmarked path, its final SELECT shaped for
// speed. An effect of sql/effect/ is conditional: the cancel's says what
// it expects to find (still accepted).
var effects = func() map[string]effectStatements {
	m := map[string]effectStatements{createDemoRequest: {stmts: keyStatements{
		onePhase: writeStatements{free: statement("create_demo_request.sql"), takeOver: statement("create_demo_request_takeover.sql")},
		finish:   statement("finish_claim_create_demo_request.sql"),
	}}}
	for _, name := range effectFiles() {
		m[name] = effectStatements{stmts: composed(name), conditional: true}
	}
	return m
}()

var getDemoRequestSQL = statement("get_demo_request.sql")

// CreateDemoRequest is the create's write of r, committed with the key
// (sql/create_demo_request.sql).
func (s *Store) CreateDemoRequest(r demo.Request) idempotency.Effect {
	st := effects[createDemoRequest]
	return &effect{what: createDemoRequest, stmts: &st.stmts, args: []any{r.ID, r.State, r.Topic, r.Note, r.CreatedAt}}
}

// CancelDemoRequest is the cancel's write of r, as decided, committed with
// the key (sql/effect/cancel_demo_request.sql).
func (s *Store) CancelDemoRequest(r demo.Request) idempotency.Effect {
	const name = "cancel_demo_request.sql"
	st := effects[name]
	return &effect{what: name, stmts: &st.stmts, args: []any{r.State, r.CancelledAt, r.ID}, conditional: st.conditional}
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
