package postgres

// SQLFiles is the embedded folder of statements (sql/*.sql), for the tests
// that prepare and run the files themselves.
var SQLFiles = sqlFiles
