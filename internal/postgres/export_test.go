package postgres

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

// CitusCall is the text the store runs on Citus for the key write
// sql/name: the call of its function.
func CitusCall(name string) string { return keyWriteOf(name).citus }
