package postgres

import "github.com/demo-api/demo-api/internal/idempotency"

// SQLFiles is the embedded folder of statements (sql/*.sql), for the tests
// that prepare and run the files themselves.
var SQLFiles = sqlFiles

// The columns the store scans by position, in its order: of the statements
// that write a key row, of the finishes, and of lookup_key.sql.
var (
	WriteColumns  = writeColumns
	FinishColumns = finishColumns
	LookupColumns = lookupColumns
)

// DBErr is dbErr, for the tests of what the store answers.
var DBErr = dbErr

// StatementsEffect is an effect of statements a test brings (the one-phase
// write and the two-phase finish, with their business arguments), as a
// typed constructor in demo.go makes one of the store's own; on Citus too
// they run as they are.
func StatementsEffect(what, onePhase, finish string, conditional bool, args ...any) idempotency.Effect {
	return &effect{what: what, args: args, conditional: conditional, stmts: &keyStatements{
		onePhase: stmt{sql: onePhase, citus: onePhase}, finish: stmt{sql: finish, citus: finish}}}
}

// CitusCall is the text the store runs on Citus for the key write
// sql/name: the call of its function.
func CitusCall(name string) string { return keyWriteOf(name).citus }

// Await is await, for the tests of a pool's waiters.
var Await = await

// ScanCall is the text the store runs on Citus, once per shard, for the
// statement sql/name that scans: the call of its function.
func ScanCall(name string) string { return scanOf(name).citus }
