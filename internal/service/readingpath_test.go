package service

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadingPathIsShort: the README's "Read the code" links at most six
// code files, and a learner who reads what it names and opens, once, each
// function of the same package that those call reads at most 630 lines. A
// linked file is read whole unless the item names its parts (`Runner.Do`):
// then those declarations, with their doc comments, and their callees.
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
	link := regexp.MustCompile(`\]\(([^)#]+\.(?:go|sql))\)((?:,?\s*(?:and)?\s*` + "`[^`]+`" + `)*)`)
	name := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)`")
	r := reader{t: t, read: map[string]bool{}, pkgs: map[string]map[string][]decl{}}
	files := map[string]bool{}
	for _, item := range items {
		for _, m := range link.FindAllStringSubmatch(item, -1) {
			file := filepath.Join("../..", m[1])
			files[file] = true
			var names []string
			for _, n := range name.FindAllStringSubmatch(m[2], -1) {
				names = append(names, n[1])
			}
			before := r.lines
			r.follow(file, names)
			t.Logf("%s %v: %d lines", m[1], names, r.lines-before)
		}
	}
	t.Logf("the reading path: %d lines in %d files linked", r.lines, len(files))
	if len(files) > 6 {
		t.Errorf("the reading path links %d code files, more than 6", len(files))
	}
	if r.lines > 630 {
		t.Errorf("the reading path is %d lines, more than 630", r.lines)
	}
}

// decl is a declaration of a package, as a reader opens it.
type decl struct {
	id        string // file:line, so that each is read once
	lines     int    // with its doc comment
	callees   []string
	name, typ string // typ: the receiver's type, for a method
}

type reader struct {
	t     *testing.T
	lines int
	read  map[string]bool              // declarations and files read
	pkgs  map[string]map[string][]decl // by folder, then by name
}

// follow reads file whole, or its declarations names (Type.Method or
// Name) and the functions and methods of its package that they call.
func (r *reader) follow(file string, names []string) {
	if len(names) == 0 {
		if !r.read[file] {
			src, err := os.ReadFile(file)
			if err != nil {
				r.t.Fatal(err)
			}
			r.read[file] = true
			r.lines += strings.Count(strings.TrimRight(string(src), "\n"), "\n") + 1
		}
		return
	}
	pkg := r.pkg(filepath.Dir(file))
	for _, want := range names {
		typ, n, ok := strings.Cut(want, ".")
		if !ok {
			typ, n = "", want
		}
		found := false
		for _, d := range pkg[n] {
			if filepath.Base(strings.Split(d.id, ":")[0]) != filepath.Base(file) || (typ != "" && d.typ != typ) {
				continue
			}
			found = true
			r.take(d)
			for _, c := range d.callees {
				for _, callee := range pkg[c] {
					r.take(callee)
				}
			}
		}
		if !found {
			r.t.Errorf("%s has no declaration %s", file, want)
		}
	}
}

func (r *reader) take(d decl) {
	if !r.read[d.id] {
		r.read[d.id] = true
		r.lines += d.lines
		r.t.Logf("  %s %s: %d lines", filepath.Base(d.id), strings.Trim(d.typ+"."+d.name, "."), d.lines)
	}
}

// pkg parses the non-test Go files of dir: its functions, methods and
// types by name, each with the names it calls.
func (r *reader) pkg(dir string) map[string][]decl {
	if p, ok := r.pkgs[dir]; ok {
		return p
	}
	p := map[string][]decl{}
	r.pkgs[dir] = p
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		r.t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, d := range f.Decls {
			var doc *ast.CommentGroup
			var dd decl
			switch d := d.(type) {
			case *ast.FuncDecl:
				doc, dd.name = d.Doc, d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					dd.typ = receiver(d.Recv.List[0].Type)
				}
				dd.callees = calls(d.Body)
			case *ast.GenDecl:
				s, ok := d.Specs[0].(*ast.TypeSpec)
				if len(d.Specs) != 1 || !ok {
					continue
				}
				doc, dd.name = d.Doc, s.Name.Name
			default:
				continue
			}
			start := d.Pos()
			if doc != nil {
				start = doc.Pos()
			}
			pos := fset.Position(start)
			dd.id = fmt.Sprintf("%s:%d", pos.Filename, pos.Line)
			dd.lines = fset.Position(d.End()).Line - pos.Line + 1
			p[dd.name] = append(p[dd.name], dd)
		}
	}
	return p
}

// receiver is the name of a method's receiver type.
func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiver(e.X)
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.IndexListExpr:
		return receiver(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// calls lists the names body calls: f(…), x.f(…), f[T](…).
func calls(body *ast.BlockStmt) []string {
	var names []string
	if body == nil {
		return nil
	}
	ast.Inspect(body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fun := c.Fun
		switch f := fun.(type) {
		case *ast.IndexExpr:
			fun = f.X
		case *ast.IndexListExpr:
			fun = f.X
		}
		switch f := fun.(type) {
		case *ast.Ident:
			names = append(names, f.Name)
		case *ast.SelectorExpr:
			names = append(names, f.Sel.Name)
		}
		return true
	})
	return names
}
