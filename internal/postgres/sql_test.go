package postgres_test

import (
	"io/fs"
	"testing"

	"github.com/demo-api/demo-api/internal/postgres"
)

// readSQL returns the embedded file sql/name.
func readSQL(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(postgres.SQLFiles, "sql/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
