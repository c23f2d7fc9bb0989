package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadingPathIsShort: the parts the README's "Read the code" names
// exist, and a learner reads at most 400 lines to see every branch and the
// atomic finish. A linked file is read whole unless the item names its
// parts (`Runner.Do`, `held`): then only those declarations, with their doc
// comments.
func TestReadingPathIsShort(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Read the code\n")
	section, _, _ = strings.Cut(section, "\n## ")
	items := regexp.MustCompile(`(?m)^\d+\. `).Split(section, -1)[1:]
	if len(items) == 0 {
		t.Fatal(`no numbered items under "## Read the code"`)
	}
	link := regexp.MustCompile(`\]\(([^)]+)\)((?:,?\s*(?:and)?\s*` + "`[^`]+`" + `)*)`)
	name := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)`")
	total := 0
	for _, item := range items {
		for _, m := range link.FindAllStringSubmatch(item, -1) {
			file := filepath.Join("../..", m[1])
			var names []string
			for _, n := range name.FindAllStringSubmatch(m[2], -1) {
				names = append(names, n[1])
			}
			n := linesOf(t, file, names)
			t.Logf("%s %v: %d lines", m[1], names, n)
			total += n
		}
	}
	t.Logf("the reading path: %d lines", total)
	if total > 400 {
		t.Errorf("the reading path is %d lines, more than 400", total)
	}
}

// linesOf counts the lines of file, or of its declarations names (a method
// as Type.Method or Method) with their doc comments.
func linesOf(t *testing.T, file string, names []string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		return strings.Count(strings.TrimRight(string(src), "\n"), "\n") + 1
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, want := range names {
		want = want[strings.LastIndex(want, ".")+1:]
		found := false
		for _, d := range f.Decls {
			var doc *ast.CommentGroup
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.Name != want {
					continue
				}
				doc = d.Doc
			case *ast.GenDecl:
				if len(d.Specs) != 1 {
					continue
				}
				if s, ok := d.Specs[0].(*ast.TypeSpec); !ok || s.Name.Name != want {
					continue
				}
				doc = d.Doc
			default:
				continue
			}
			start := d.Pos()
			if doc != nil {
				start = doc.Pos()
			}
			lines += fset.Position(d.End()).Line - fset.Position(start).Line + 1
			found = true
		}
		if !found {
			t.Errorf("%s has no declaration %s", file, want)
		}
	}
	return lines
}
