package service

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
)

// TestWorkflows: actionlint finds nothing in the CI workflows under
// .github/workflows. A finding is a CI run that would fail to start, or
// run something else than meant, found before a push. (Its shellcheck and
// pyflakes rules are off: they depend on tools of the machine.)
func TestWorkflows(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// The project is named here, not found: actionlint looks for a .git
	// beside .github, which a copy of the tree may not have.
	project, err := actionlint.NewProject(root)
	if err != nil {
		t.Fatal(err)
	}
	linter := newLinter(t)
	findings, err := linter.LintDir(project.WorkflowsDir(), project)
	if err != nil {
		t.Fatalf("actionlint: %v", err)
	}
	for _, f := range findings {
		t.Errorf("%s:%d:%d: %s [%s]", f.Filepath, f.Line, f.Column, f.Message, f.Kind)
	}

	// The linter is live: a workflow with a mistake of each kind it checks
	// here (an unknown input, an unknown runner, a bad expression) is found.
	broken := `on: push
jobs:
  test:
    runs-on: ubuntu-lastest
    steps:
      - uses: actions/setup-go@v5
        with:
          go-version-fil: go.mod
      - run: echo ${{ github.nope }}
`
	findings, err = newLinter(t).Lint("broken.yml", []byte(broken), project)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range findings {
		kinds = append(kinds, f.Kind)
	}
	for _, want := range []string{"runner-label", "action", "expression"} {
		if !strings.Contains(strings.Join(kinds, " "), want) {
			t.Errorf("actionlint found %v in a broken workflow, want a %s finding among them", kinds, want)
		}
	}
}

func newLinter(t *testing.T) *actionlint.Linter {
	t.Helper()
	l, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{Color: actionlint.ColorOptionKindNever})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
