package postgres

import (
	"context"
	"embed"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// SQLFiles is the folder of statements (sql/*.sql), for the tests that
// prepare and run the files themselves.
//
//go:embed sql/*.sql
var SQLFiles embed.FS

// CitusFiles is the folder of the statements of the store on Citus (citus/*.sql).
//
//go:embed citus/*.sql
var CitusFiles embed.FS

// The columns the store scans by position, in its order: of the statements
// that write a key row, and of lookup_key.sql.
var (
	WriteColumns  = writeColumns
	LookupColumns = lookupColumns
)

// DBErr is dbErr, for the tests of what the store answers.
var DBErr = dbErr

// KeyWriteEffect is the effect of an operation's statement that a test
// brings, made as demo.go makes the store's own.
func KeyWriteEffect(what, statement string, args ...any) idempotency.Effect {
	return &effect{what: what, stmt: statement, args: args}
}

// Await runs fn on db's pool under the watch its key statements run under
// (watch), for the tests of a pool's waiters.
func Await(ctx context.Context, db *sqlx.DB, fn func(context.Context) error) error {
	ctx, end := watch(ctx, db)
	return end(fn(ctx))
}

// Unprepare makes s send its statements unprepared, as through a Pooled db.
func Unprepare(s *Store) { s.rows = plain{s.db} }
