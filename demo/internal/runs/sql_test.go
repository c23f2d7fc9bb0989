package runs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestClaimRunRepeatsTheClaim: a step-wise claim writes its key as the
// template's claim does, with its run started in the same statement (the
// CTE started): claim_run.sql calls write_key as claim.sql does, word for word.
func TestClaimRunRepeatsTheClaim(t *testing.T) {
	call := regexp.MustCompile(`FROM write_key\([^)]*\)`)
	got := call.FindAllString(statementOf(t, "sql/claim_run.sql"), -1)
	want := call.FindString(statementOf(t, "../../../internal/postgres/sql/claim.sql"))
	if len(got) != 1 || want == "" || got[0] != want {
		t.Errorf("claim_run.sql writes its key with %q, claim.sql with %q", got, want)
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
