package postgres

import (
	"io/fs"
	"path"
	"testing"
)

// TestStatementNames: the span of every statement the store runs is named
// after its file, which the statement's first line gives; text of no
// statement file is "sql".
func TestStatementNames(t *testing.T) {
	// The statements that run: the files of sql/.
	texts := map[string]string{}
	files, err := fs.Glob(SQLFiles, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(SQLFiles, f)
		if err != nil {
			t.Fatal(err)
		}
		texts[path.Base(f)] = string(b)
	}
	if len(texts) < 15 {
		t.Fatalf("only %d statements found", len(texts))
	}
	for name, text := range texts {
		if got := statementName(text); got != name {
			t.Errorf("the statement of %s is named %q", name, got)
		}
	}
	for _, text := range []string{"SELECT 1", "-- a comment: x\nSELECT 1", "-- x.sql\nSELECT 1", ""} {
		if got := statementName(text); got != "sql" {
			t.Errorf("%q is named %q, want sql", text, got)
		}
	}
}
