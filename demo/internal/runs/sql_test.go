package runs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestClaimRunRepeatsTheClaim: a step-wise claim is the template's claim
// word for word, with its run started in the same statement (the CTE
// started): claim_run.sql, without that CTE and its comments, is claim.sql.
func TestClaimRunRepeatsTheClaim(t *testing.T) {
	started := regexp.MustCompile(`(?s)\), started AS \(\n.*?\n\)\nSELECT `)
	got := started.ReplaceAllString(statementOf(t, "sql/claim_run.sql"), ")\nSELECT ")
	if want := statementOf(t, "../../../internal/postgres/sql/claim.sql"); got != want {
		t.Errorf("claim_run.sql, without its run, is not claim.sql:\n%s\n---\n%s", got, want)
	}
}

// statementOf is the statement of the SQL file at path, without its
// comment lines.
func statementOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
