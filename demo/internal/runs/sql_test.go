package runs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestClaimRunRepeatsTheClaim: a step-wise claim is the template's claim
// word for word, with its run started in the same statement (the CTE
// started): claim_run.sql and claim_run_takeover.sql, without that CTE and
// their comments, are claim.sql and claim_takeover.sql.
func TestClaimRunRepeatsTheClaim(t *testing.T) {
	started := regexp.MustCompile(`(?s)\), started AS \(\n.*?\n\)\nSELECT `)
	for run, claim := range map[string]string{"claim_run.sql": "claim.sql", "claim_run_takeover.sql": "claim_takeover.sql"} {
		got := started.ReplaceAllString(statementOf(t, "sql/"+run), ")\nSELECT ")
		if want := statementOf(t, "../../../internal/postgres/sql/"+claim); got != want {
			t.Errorf("%s, without its run, is not %s:\n%s\n---\n%s", run, claim, got, want)
		}
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
