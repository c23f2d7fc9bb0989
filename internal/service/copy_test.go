package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCopyFollowsItsName: the template as a team copies it (the files git
// knows, without its nested modules, as gonew copies a module) and renames
// it (make rename MODULE=example.com/acme/tickets RESOURCE=ticket) says
// tickets where an operator looks, nothing of the old name anywhere, ticket
// for the example resource in every form but those scripts/rename says it
// leaves, links no Markdown page at a file that is not there, and keeps
// nothing that checks the template itself. As a team keeps it (a git
// repository with its own README) it builds, vets and passes its fast tier.
func TestCopyFollowsItsName(t *testing.T) {
	if testing.Short() {
		t.Skip("copies the tree, then builds, vets and tests it under another module path: a few minutes")
	}
	t.Parallel() // mostly compiling: it overlaps TestIdemcheckStrict's waits
	ls, err := exec.Command("git", "-C", "../..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git work tree (git ls-files: %v): the copy is made of the files git knows", err)
	}
	self, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	oldModule := strings.TrimSpace(string(self))
	oldName := oldModule[strings.LastIndex(oldModule, "/")+1:]
	oldIdent := strings.ReplaceAll(oldName, "-", "_")

	var nested []string // the folders of the template's nested modules
	for f := range strings.SplitSeq(strings.TrimRight(string(ls), "\x00"), "\x00") {
		if dir, ok := strings.CutSuffix(f, "/go.mod"); ok {
			nested = append(nested, dir+"/")
		}
	}
	if len(nested) == 0 {
		t.Fatal("found no nested module (demo/, conformance/): the copy would not show that it stands without them")
	}
	tree := t.TempDir()
	named := 0 // the template's files that name the example resource
	for f := range strings.SplitSeq(strings.TrimRight(string(ls), "\x00"), "\x00") {
		if slices.ContainsFunc(nested, func(dir string) bool { return strings.HasPrefix(f, dir) }) {
			continue
		}
		info, err := os.Lstat(filepath.Join("../..", f))
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted, not yet staged; or not a file
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(tree, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		if resourceRE.Match(b) {
			named++
		}
	}
	if named < 50 {
		t.Errorf("%d of the template's files name the example resource as resourceRE finds it, want at least 50: the check below would find nothing", named)
	}
	inCopy := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in the copy: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for range 2 { // the second run changes nothing
		inCopy("go", "run", "./scripts/rename", "example.com/acme/tickets")
	}
	for range 2 {
		inCopy("go", "run", "./scripts/rename", "-resource", "ticket")
	}
	for _, f := range []string{"copy_test.go", "readme_test.go", "readingpath_test.go"} {
		if _, err := os.Stat(filepath.Join(tree, "internal", "service", f)); err == nil {
			t.Errorf("the copy keeps internal/service/%s, which checks the template", f)
		}
	}

	if _, err := os.Stat(filepath.Join(tree, "cmd", "tickets", "main.go")); err != nil {
		t.Errorf("the copy's command is not cmd/tickets: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tree, "cmd", oldName)); err == nil {
		t.Errorf("the copy still has cmd/%s", oldName)
	}
	for _, f := range []string{"internal/ticket/ticket.go", "internal/httpapi/tickets.go", "internal/postgres/sql/create_ticket.sql"} {
		if _, err := os.Stat(filepath.Join(tree, filepath.FromSlash(f))); err != nil {
			t.Errorf("the copy's example resource has no %s: %v", f, err)
		}
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(tree, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	if title, _, _ := strings.Cut(readme, "\n"); title != "# tickets" {
		t.Errorf("the copy's README is titled %q, want # tickets", title)
	}
	for _, section := range []string{"\n## Starting a service from it\n", "\n## The full demo\n"} {
		if strings.Contains(readme, section) {
			t.Errorf("the copy's README keeps the template's section %q", strings.TrimSpace(section))
		}
	}
	// The conformance suite is installed by the template's path, which the
	// copy keeps, though it has no conformance/.
	if ops := read("docs/operations.md"); !strings.Contains(ops, "go install "+oldModule+"/conformance/cmd/idemcheck@latest") {
		t.Errorf("the copy's docs/operations.md does not install idemcheck from %s/conformance", oldModule)
	}
	for f, want := range map[string]string{
		"Makefile":                      "IMAGE ?= tickets\n",
		"docker-compose.yml":            "\n  tickets:\n",
		"Dockerfile":                    `ENTRYPOINT ["/tickets"]`,
		"api/openapi.yaml":              "\n  /v1/tickets/{id}/cancel:\n",
		"api/client/client.go":          "TicketID ",
		"internal/delivery/delivery.go": `"ticket:" + ticketID`,
	} {
		if !strings.Contains(read(f), want) {
			t.Errorf("the copy's %s does not say %q", f, want)
		}
	}
	// Nothing says the old name, but the LICENSE's authors, a URL of
	// where the template came from, and the conformance suite's path; nor
	// the example resource's, in a file's name or text, but the tool's own
	// (its rules and tests show the template's words) and chi's name.
	var pages []string
	oldUpper := strings.ToUpper(oldIdent)
	err = filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tree, path)
		if strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		if d.Name() == "LICENSE" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(filepath.ToSlash(rel), "scripts/rename/") {
			for _, s := range []string{filepath.ToSlash(rel), strings.ReplaceAll(string(b), "middleware.RequestID", "")} {
				if loc := resourceRE.FindStringIndex(s); loc != nil {
					t.Errorf("the copy's %s still names the example resource: …%s…", rel, s[max(0, loc[0]-30):min(len(s), loc[1]+30)])
				}
			}
		}
		text := strings.ReplaceAll(string(b), "://"+oldModule, "")
		text = strings.ReplaceAll(text, oldModule+"/conformance/", "")
		for _, old := range []string{oldName, oldIdent, oldUpper} {
			if i := strings.Index(text, old); i >= 0 {
				t.Errorf("the copy's %s still says %s: …%s…", rel, old, text[max(0, i-30):min(len(text), i+30)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Every metric is named tickets_…, as the scanner finds the template's
	// named after its own module.
	for dir, prefix := range map[string]string{"../..": oldIdent + "_", tree: "tickets_"} {
		names := metricNames(t, dir)
		if len(names) < 10 {
			t.Errorf("found %d metric names in %s, want the service's (at least 10): %v", len(names), dir, names)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, prefix) {
				t.Errorf("metric %s in %s, want the prefix %s", n, dir, prefix)
			}
		}
	}

	testenv.CheckLinks(t, pages...)

	// As a team keeps it: its own README, in a git repository of its own.
	if err := os.WriteFile(filepath.Join(tree, "README.md"), []byte("# tickets\n\nOur tickets service.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inCopy("git", "init", "-q")
	inCopy("git", "add", "-A")
	inCopy("git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "tickets, from the template")
	inCopy("go", "vet", "./...")
	inCopy("go", "test", "-short", "-count=1", "-vet=off", "./...")

	bin := filepath.Join(t.TempDir(), "tickets")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	inCopy("go", "build", "-o", bin, "./cmd/tickets")
	usage, _ := exec.Command(bin).CombinedOutput()
	if !strings.HasPrefix(string(usage), "usage: tickets <command>") {
		t.Errorf("the copy's binary, run with no command, printed:\n%s\nwant its usage as tickets", usage)
	}
	check := filepath.Join(tree, "internal", "namecheck")
	if err := os.MkdirAll(check, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/acme/tickets/internal/tracing\"\n)\n\n" +
		"func main() { fmt.Print(tracing.FromEnv(func(string) string { return \"\" }).ServiceName) }\n"
	if err := os.WriteFile(filepath.Join(check, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := inCopy("go", "run", "./internal/namecheck"); got != "tickets" {
		t.Errorf("the copy's tracing service name is %q, want tickets", got)
	}
}

// resourceRE finds the template's example resource in each form make rename
// RESOURCE=… renames: demo request(s) in every case form, the business
// package (internal/demo, package demo, demo.Service), and the id, state and
// code words spelled with "request" alone.
var resourceRE = regexp.MustCompile(`(?i:demo[ _.-]?requests?)|internal/demo\b|package demo\b|\bdemo\.[A-Z]|\bdemo(_test)?\.go\b|` +
	`\brequest_(ids?|state|not_cancellable)\b|(?i:\bREQUEST_IDS?\b)|\brequestI[dD]s?\b|RequestIDs?\b`)

// metricNames are the names of the Prometheus metrics that the Go code
// under dir (not its tests) declares: each prometheus.…Opts's Namespace,
// Subsystem and Name joined, and each prometheus.NewDesc's first argument.
func metricNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	str := func(e ast.Expr, pos token.Pos, fset *token.FileSet) string {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Errorf("%s: a metric name that is not a string literal", fset.Position(pos))
			return ""
		}
		s, _ := strconv.Unquote(lit.Value)
		return s
	}
	isProm := func(e ast.Expr, name func(string) bool) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "prometheus" && name(sel.Sel.Name)
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "demo" || d.Name() == ".git") && path != dir {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if !isProm(n.Type, func(s string) bool { return strings.HasSuffix(s, "Opts") }) {
					return true
				}
				var parts []string
				for _, field := range []string{"Namespace", "Subsystem", "Name"} {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == field {
								if s := str(kv.Value, kv.Pos(), fset); s != "" {
									parts = append(parts, s)
								}
							}
						}
					}
				}
				if len(parts) > 0 {
					names = append(names, strings.Join(parts, "_"))
				}
			case *ast.CallExpr:
				if isProm(n.Fun, func(s string) bool { return s == "NewDesc" }) && len(n.Args) > 0 {
					names = append(names, str(n.Args[0], n.Pos(), fset))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
