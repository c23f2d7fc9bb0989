package service

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is this module's import path: a reference to one of its packages
// is followed (as a doc comment); one to any other package is not.
const module = "github.com/demo-api/demo-api/"

// The most lines a reader follows: the whole path, and the Runner's part.
const (
	maxPath   = 900
	maxRunner = 350
)

// TestReadingPathIsShort counts the README's "Read the code" path as a
// reader reads it: every declaration an item names, and, transitively
// through its own package, every function and method it calls and every
// type, const and var it uses, each once with its doc comment; a use of
// another package of this module counts that declaration's doc comment
// only; a linked file without names (the statement) is read whole. The
// path names the Runner, the operation and its handler, the store's write
// for the create and the create's statement, and the design's name for the
// one-statement create is on it: at most 900 lines for the whole, and 350
// lines in 2 files for the Runner (Runner.Do with Decide).
func TestReadingPathIsShort(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Read the code\n")
	section, _, _ = strings.Cut(section, "\n## ")
	items := regexp.MustCompile(`(?m)^\d+\. `).Split(section, -1)[1:]
	link := regexp.MustCompile(`\]\(([^)#]+\.(?:go|sql))\)((?:,?\s*(?:and)?\s*` + "`[^`]+`" + `)*)`)
	name := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)`")
	path := newReader(t)
	var named []string
	for _, item := range items {
		for _, m := range link.FindAllStringSubmatch(item, -1) {
			var names []string
			for _, n := range name.FindAllStringSubmatch(m[2], -1) {
				names = append(names, n[1])
				named = append(named, m[1]+" "+n[1])
			}
			if len(names) == 0 {
				named = append(named, m[1])
			}
			before := path.lines
			path.follow(filepath.Join("../..", m[1]), names...)
			t.Logf("%s %v: %d lines", m[1], names, path.lines-before)
		}
	}
	for _, want := range []string{
		"internal/idempotency/idempotency.go Runner.Do", "internal/idempotency/decide.go Decide",
		"internal/httpapi/demo_requests.go createDemoRequest", "internal/httpapi/operation.go Idempotent",
		"internal/postgres/keys.go Store.CompleteAtomically", "internal/postgres/sql/create_demo_request.sql",
		"migrations/000003_create_demo_request.up.sql", "migrations/000002_write_key.up.sql",
	} {
		if !slices.Contains(named, want) {
			t.Errorf("the README's path does not name %s", want)
		}
	}
	t.Logf("the reading path: %d lines in %d files", path.lines, len(path.files))
	if path.lines > maxPath {
		t.Errorf("the reading path is %d lines, more than %d", path.lines, maxPath)
	}
	if !path.took["createResultAndFinishAtomically"] {
		t.Error("createResultAndFinishAtomically, the one-statement create, is not on the reading path")
	}

	runner := newReader(t)
	runner.follow("../../internal/idempotency/idempotency.go", "Runner.Do")
	runner.follow("../../internal/idempotency/decide.go", "Decide")
	t.Logf("the Runner (Runner.Do and Decide): %d lines in %d files", runner.lines, len(runner.files))
	if runner.lines > maxRunner || len(runner.files) > 2 {
		t.Errorf("the Runner is %d lines in %d files, more than %d in 2", runner.lines, len(runner.files), maxRunner)
	}
}

// TestReadingPathCounter: the counter follows callees, the types and consts
// they use, and another package's doc comment, each once, a method's called
// on a value of that package's type too; a method call is followed to the
// methods of that name on the types read, not on every type.
func TestReadingPathCounter(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a/a.go": "package a\n\nimport \"" + module + "b\"\n\n// A calls f.\nfunc A() { f().m(); f(); b.V.Call() }\n\nfunc f() T { return T{n: b.B} }\n\n// T is used.\ntype T struct {\n\tn int\n}\n\nfunc (T) m() {}\n\n// U is not read: its m is not T's.\ntype U struct{}\n\nfunc (U) m() {}\n\nfunc unused() {}\n",
		"b/b.go": "package b\n\n// B is\n// two lines.\nconst B = 1\n\n// V is a W.\nvar V W\n\ntype W struct{}\n\n// Call is\n// two lines too.\nfunc (W) Call() {}\n",
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := newReader(t)
	r.root = dir
	r.follow(filepath.Join(dir, "a/a.go"), "A")
	if want := 2 + 1 + 4 + 1 + 2 + 1 + 2; r.lines != want || len(r.files) != 1 {
		t.Fatalf("%d lines in %d files, want %d in 1", r.lines, len(r.files), want)
	}
}

// decl is a declaration as a reader opens it.
type decl struct {
	id      string // file:line, so that each is read once
	file    string
	name    string // Type.Method for a method
	lines   int    // with its doc comment
	doc     int    // of its doc comment
	uses    []string
	methods []string            // the methods it calls, by name
	types   []string            // the types it declares
	imports map[string][]string // the declarations of other packages it uses, by import path
	modules []string            // the packages of this module its file imports, by import path
}

type reader struct {
	t     *testing.T
	root  string // the module's folder
	lines int
	files map[string]bool              // files of which a declaration was read whole
	took  map[string]bool              // declarations read, by name
	read  map[string]bool              // declarations counted, by id
	typed map[string]bool              // types read, by folder and name
	later map[string][]decl            // methods called on a type not read yet, by folder and type
	pkgs  map[string]map[string][]decl // by folder, then by name (a method also by Type.Method)
}

func newReader(t *testing.T) *reader {
	return &reader{t: t, root: "../..", files: map[string]bool{}, took: map[string]bool{},
		read: map[string]bool{}, typed: map[string]bool{}, later: map[string][]decl{}, pkgs: map[string]map[string][]decl{}}
}

// follow reads file whole (names empty), or the declarations names of its
// package (Name or Type.Method) and what they use.
func (r *reader) follow(file string, names ...string) {
	if len(names) == 0 {
		src, err := os.ReadFile(file)
		if err != nil {
			r.t.Fatal(err)
		}
		if !r.read[file] {
			r.read[file], r.files[file] = true, true
			r.lines += strings.Count(strings.TrimRight(string(src), "\n"), "\n") + 1
		}
		return
	}
	dir := filepath.Dir(file)
	pkg := r.pkg(dir)
	for _, n := range names {
		found := false
		for _, d := range pkg[n] {
			if filepath.Base(d.file) == filepath.Base(file) {
				found = true
				r.take(dir, d)
			}
		}
		if !found {
			r.t.Errorf("%s has no declaration %s", file, n)
		}
	}
}

// take reads d whole, then what it uses: in its package whole, elsewhere the doc comment.
func (r *reader) take(dir string, d decl) {
	if r.read[d.id] {
		return
	}
	bare := d.name[strings.LastIndex(d.name, ".")+1:] // a method's name without its type
	r.read[d.id], r.files[d.file], r.took[bare] = true, true, true
	r.lines += d.lines
	r.t.Logf("  %s:%s %s: %d lines", filepath.Base(d.file), strings.Split(d.id, ":")[1], d.name, d.lines)
	pkg := r.pkg(dir)
	for _, u := range d.uses {
		for _, used := range pkg[u] {
			if !strings.Contains(used.name, ".") { // a method is taken where it is called
				r.take(dir, used)
			}
		}
	}
	for _, t := range d.types { // the methods called on it before it was read
		r.typed[dir+" "+t] = true
		for _, m := range r.later[dir+" "+t] {
			r.take(dir, m)
		}
	}
	for _, m := range d.methods { // a method is read once its type is: a call's receiver is of a type read
		for _, used := range pkg[m] {
			if recv, _, ok := strings.Cut(used.name, "."); ok {
				if r.typed[dir+" "+recv] {
					r.take(dir, used)
				} else {
					r.later[dir+" "+recv] = append(r.later[dir+" "+recv], used)
				}
			}
		}
	}
	for path, names := range d.imports {
		r.docs(path, names, false)
	}
	for _, path := range d.modules { // a method called on a value of another package's type (x.m): its doc comment
		r.docs(path, d.methods, true)
	}
}

// docs counts the doc comments of the declarations names of the package at
// path, each once: its functions, types, consts and vars, or its methods.
// A method is found by its name alone, on every type of that package: at
// least what a reader opens.
func (r *reader) docs(path string, names []string, methods bool) {
	other := r.pkg(filepath.Join(r.root, strings.TrimPrefix(path, module)))
	for _, n := range names {
		for _, used := range other[n] {
			if !r.read[used.id] && strings.Contains(used.name, ".") == methods {
				r.read[used.id] = true
				r.lines += used.doc
				r.t.Logf("  %s.%s: %d lines of doc comment", filepath.Base(path), used.name, used.doc)
			}
		}
	}
}

// pkg parses the non-test Go files of dir: its declarations by name.
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
		imports := map[string]string{} // by the name the file uses
		var modules []string
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(ip, module) {
				modules = append(modules, ip)
			}
			n := filepath.Base(ip)
			if im.Name != nil {
				n = im.Name.Name
			}
			imports[n] = ip
		}
		for _, gd := range f.Decls {
			d := decl{file: path, modules: modules}
			var doc *ast.CommentGroup
			var names []string
			switch gd := gd.(type) {
			case *ast.FuncDecl:
				doc, d.name = gd.Doc, gd.Name.Name
				if gd.Recv != nil && len(gd.Recv.List) == 1 {
					d.name = receiver(gd.Recv.List[0].Type) + "." + d.name
					names = append(names, gd.Name.Name)
				}
				names = append(names, d.name)
			case *ast.GenDecl:
				if gd.Tok == token.IMPORT {
					continue
				}
				doc = gd.Doc
				for _, s := range gd.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names = append(names, s.Name.Name)
						d.types = append(d.types, s.Name.Name)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names = append(names, n.Name)
						}
					}
				}
				d.name = names[0]
			}
			start := gd.Pos()
			if doc != nil {
				start = doc.Pos()
				d.doc = fset.Position(doc.End()).Line - fset.Position(doc.Pos()).Line + 1
			}
			pos := fset.Position(start)
			d.id = fmt.Sprintf("%s:%d", path, pos.Line)
			d.lines = fset.Position(gd.End()).Line - pos.Line + 1
			d.uses, d.methods, d.imports = refs(gd, imports)
			for _, n := range names {
				p[n] = append(p[n], d)
			}
		}
	}
	return p
}

// refs lists the names a declaration uses: identifiers (its own package's
// functions, types, consts and vars, where they are declared), the methods
// it calls or names (x.f), and the declarations of this module's other
// packages (pkg.Name). The names a declaration gives (fields, parameters)
// and field names in composite literals are not uses.
func refs(n ast.Node, imports map[string]string) (uses, methods []string, other map[string][]string) {
	other = map[string][]string{}
	keys := map[*ast.Ident]bool{}
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field: // a field's, parameter's or method's own name
			for _, id := range n.Names {
				keys[id] = true
			}
		case *ast.CompositeLit:
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok {
						keys[id] = true
					}
				}
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok {
				if ip, ok := imports[x.Name]; ok {
					if strings.HasPrefix(ip, module) {
						other[ip] = append(other[ip], n.Sel.Name)
					}
					return false
				}
			}
			methods = append(methods, n.Sel.Name)
			u, m, o := refs(n.X, imports)
			uses, methods = append(uses, u...), append(methods, m...)
			for ip, names := range o {
				other[ip] = append(other[ip], names...)
			}
			return false
		case *ast.Ident:
			if !keys[n] {
				uses = append(uses, n.Name)
			}
		}
		return true
	})
	return uses, methods, other
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
