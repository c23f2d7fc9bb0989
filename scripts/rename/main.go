// Command rename gives a copy of the template its own module path and the
// names an operator sees, which follow the path's last element:
//
//	go run ./scripts/rename example.com/acme/tickets   (make rename MODULE=…)
//	go run ./scripts/rename -resource ticket           (make rename RESOURCE=…)
//
// In every text file of the tree (not .git, bin, .data, node_modules, nor the
// LICENSE, whose authors are the copy's owners to name), the old module path
// becomes the new one: go.mod, every import, and the go.mod and imports of a
// nested module that requires this one (demo/); a URL of it, https://…,
// still names where the template came from. A nested module that does not
// require this one (conformance/, installed alone) is another project's:
// its files, and its path wherever this module names it (go install
// …/conformance/cmd/idemcheck@latest), stay as they are, whether its folder
// was copied or not. Outside demo/, the old name (the old path's last
// element, e.g. orders-api) becomes the new one (tickets) wherever it stands
// as a word: the command's folder and binary, the image, the compose
// service, the usage text, the tracing service name, the README's title, the
// docs; the same with '-' written '_' (orders_api_ → tickets_): the metrics
// prefix, the development database; and in capitals (ORDERS_API_CACHE →
// TICKETS_CACHE): the settings. The command's folder cmd/<old name> moves to
// cmd/<new name> (git mv in a git work tree). Run twice with the same path,
// the second run changes nothing.
//
// With -resource (make rename RESOURCE=ticket), the example resource takes
// the new name (resource.go): demo request and demo requests in every case
// form (ticket, tickets, Ticket, TICKETS; create_demo_request becomes
// create_ticket, DemoRequestChanged TicketChanged, /v1/demo-requests
// /v1/tickets, demo-request:<id> ticket:<id>), the id, state and code words
// (requestId, request_id, RequestID, request_not_cancellable: ticketId, …),
// the business package (internal/demo, demo.Request: internal/ticket,
// ticket.Ticket), and the files whose names say them. It runs only where no
// nested module builds on the resource (demo/ does: remove it first), and
// neither rename runs where the service and the resource share a name (the
// service tickets, the resource ticket): rename both in one call.
//
// What checks the template itself leaves with it (templateFiles and
// templateSections, below): the test that copies it, the tests of the
// README's walkthrough and reading path, and the README's sections about the
// template and its full demo. A copy's README is its team's.
//
// A path ending in a major version (…/tickets/v2) takes the element before
// it; a second argument names the service otherwise.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rename:", err)
		os.Exit(1)
	}
}

// What checks the template itself, not a service made from it, leaves with
// it: these files, and these sections of README.md (from their heading to
// the next).
var (
	templateFiles = []string{
		"internal/service/copy_test.go",        // copies the template and renames it
		"internal/service/readme_test.go",      // runs the README's walkthrough
		"internal/service/readingpath_test.go", // counts the README's reading path
	}
	templateSections = []string{"Starting a service from it", "The full demo"}
)

// installedAlone are the folders of nested modules installed by the
// template's path (go install <module>/conformance/…@latest).
var installedAlone = []string{"conformance"}

var (
	nameRE    = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	versionRE = regexp.MustCompile(`^v[0-9]+$`)
	moduleRE  = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)"?\s*$`)
)

const usage = "usage: go run ./scripts/rename [-resource <name> [-resources <plural>]] [<module path> [service name]]"

func run(args []string) error {
	flags := flag.NewFlagSet("rename", flag.ContinueOnError)
	singular := flags.String("resource", "", "the example resource's new name: a lowercase word, or two joined by '-' or '_'")
	plural := flags.String("resources", "", "its plural, where adding s (es, ies) does not make it")
	if err := flags.Parse(args); err != nil {
		return err
	}
	args = flags.Args()
	if len(args) > 2 || len(args) == 0 && *singular == "" {
		return errors.New(usage)
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		return fmt.Errorf("run it at the module's root: %w", err)
	}
	m := moduleRE.FindSubmatch(gomod)
	if m == nil {
		return errors.New("go.mod names no module")
	}
	oldModule := string(m[1])
	var to resource
	if *singular != "" {
		if to, err = newResource(*singular, *plural); err != nil {
			return err
		}
		_, on, err := nestedModules(oldModule)
		if err != nil {
			return err
		}
		if len(on) > 0 {
			return fmt.Errorf("%s builds on the example resource: rename it in a copy without %s/ (rm -r %s)", on[0].dir, on[0].dir, on[0].dir)
		}
		service := serviceName(oldModule)
		if len(args) == 2 {
			service = args[1]
		} else if len(args) == 1 {
			service = serviceName(args[0])
		}
		if to != example {
			if err := sharesNoWord(example, service); err != nil {
				return err
			}
		}
	}
	if len(args) > 0 {
		if err := renameModule(oldModule, args); err != nil {
			return err
		}
	}
	if *singular != "" {
		return renameResource(to, toolDir)
	}
	return nil
}

// toolDir is this program's folder, which a resource rename leaves as it is
// but for the example line.
const toolDir = "scripts/rename"

func renameModule(oldModule string, args []string) error {
	newModule := args[0]
	oldName := serviceName(oldModule)
	newName := serviceName(newModule)
	if len(args) == 2 {
		newName = args[1]
	}
	if !nameRE.MatchString(newName) {
		return fmt.Errorf("the service name %q is not lowercase letters, digits and '-' after a letter: give one as the second argument", newName)
	}
	if oldName != newName {
		if err := sharesNoWord(example, oldName); err != nil {
			return err
		}
	}

	r := renamer{}
	alone, _, err := nestedModules(oldModule)
	if err != nil {
		return err
	}
	for _, m := range alone {
		r.pairs = append(r.pairs, [2]string{m.path, m.path}) // kept: matched before the old path
	}
	for _, dir := range installedAlone {
		path := oldModule + "/" + dir
		r.pairs = append(r.pairs, [2]string{path, path}) // its folder copied or not
	}
	r.pairs = append(r.pairs, [2]string{oldModule, newModule})
	if nameRE.MatchString(oldName) {
		r.names = [][2]string{{oldName, newName}, {ident(oldName), ident(newName)},
			{strings.ToUpper(ident(oldName)), strings.ToUpper(ident(newName))}}
	}
	if err := leaveTemplate(); err != nil {
		return err
	}
	changed := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".data", "node_modules":
				return filepath.SkipDir
			}
			for _, m := range alone {
				if path == m.dir {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), "LICENSE") {
			return nil
		}
		inDemo := path == "demo" || strings.HasPrefix(filepath.ToSlash(path), "demo/")
		ok, err := r.file(path, !inDemo)
		if ok {
			changed++
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("module %s is now %s: %d files changed\n", oldModule, newModule, changed)

	oldCmd, newCmd := filepath.Join("cmd", oldName), filepath.Join("cmd", newName)
	if oldName != newName && r.names != nil {
		if _, err := os.Stat(oldCmd); err == nil {
			if err := move(oldCmd, newCmd); err != nil {
				return err
			}
			fmt.Printf("%s is now %s\n", oldCmd, newCmd)
		}
		fmt.Printf("the service %s is now %s (metrics %s_…)\n", oldName, newName, ident(newName))
	}
	return nil
}

// leaveTemplate removes templateFiles and README.md's templateSections.
func leaveTemplate() error {
	for _, f := range templateFiles {
		if err := os.Remove(filepath.FromSlash(f)); err == nil {
			fmt.Printf("removed %s: it checks the template\n", f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	b, err := os.ReadFile("README.md")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	readme := string(b)
	for _, heading := range templateSections {
		start := strings.Index(readme, "\n## "+heading+"\n")
		if start < 0 {
			continue
		}
		end := strings.Index(readme[start+1:], "\n## ")
		if end < 0 {
			readme = readme[:start+1]
		} else {
			readme = readme[:start] + readme[start+1+end:]
		}
		fmt.Printf("removed the README's section %q: it is the template's\n", heading)
	}
	if readme == string(b) {
		return nil
	}
	return os.WriteFile("README.md", []byte(readme), 0o644)
}

// nested is a module in a folder of this one.
type nested struct{ dir, path string }

// nestedModules lists the nested modules that do not require module (alone:
// they are renamed with nothing of it) and those that do (on).
func nestedModules(module string) (alone, on []nested, err error) {
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return err
		}
		if d.Name() != "go.mod" || path == "go.mod" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m := moduleRE.FindSubmatch(b)
		requires := regexp.MustCompile(`(?m)^\s*(require\s+)?` + regexp.QuoteMeta(module) + `\s+v`).Match(b)
		switch {
		case m != nil && !requires:
			alone = append(alone, nested{dir: filepath.Dir(path), path: string(m[1])})
		case m != nil:
			on = append(on, nested{dir: filepath.Dir(path), path: string(m[1])})
		}
		return nil
	})
	return alone, on, err
}

// serviceName is a module path's last element, or the one before a major
// version suffix.
func serviceName(module string) string {
	parts := strings.Split(module, "/")
	name := parts[len(parts)-1]
	if versionRE.MatchString(name) && len(parts) > 1 {
		name = parts[len(parts)-2]
	}
	return name
}

// ident is a name as a metric or a setting writes it.
func ident(name string) string { return strings.ReplaceAll(name, "-", "_") }

// renamer replaces, in one pass, the module path everywhere and the names
// (with names true) where they stand as words.
type renamer struct {
	pairs [][2]string // everywhere
	names [][2]string // as words
}

// file rewrites path in place when it is text and something in it changes.
func (r renamer) file(path string, names bool) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	if bytes.IndexByte(b, 0) >= 0 { // binary
		return false, nil
	}
	out := r.replace(b, names)
	if bytes.Equal(out, b) {
		return false, nil
	}
	return true, os.WriteFile(path, out, 0o644) // the file exists: its mode stays
}

func (r renamer) replace(b []byte, names bool) []byte {
	var out bytes.Buffer
	for i := 0; i < len(b); {
		old, nw := r.match(b, i, names)
		if old == "" {
			out.WriteByte(b[i])
			i++
			continue
		}
		out.WriteString(nw)
		i += len(old)
	}
	return out.Bytes()
}

// match is the replacement that starts at b[i], if any: the module path
// first, since it holds the name.
func (r renamer) match(b []byte, i int, names bool) (string, string) {
	for _, p := range r.pairs {
		if bytes.HasPrefix(b[i:], []byte(p[0])) && wordEnds(b, i, len(p[0])) {
			if bytes.HasSuffix(b[:i], []byte("://")) {
				return p[0], p[0] // a URL of the template's origin: kept
			}
			return p[0], p[1]
		}
	}
	if names {
		for _, p := range r.names {
			if bytes.HasPrefix(b[i:], []byte(p[0])) && wordEnds(b, i, len(p[0])) {
				return p[0], p[1]
			}
		}
	}
	return "", ""
}

// wordEnds reports whether b[i:i+n] has no letter or digit on either side
// (an escape such as \n before it is no letter).
func wordEnds(b []byte, i, n int) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	before := i == 0 || !alnum(b[i-1]) || i >= 2 && b[i-2] == '\\'
	return before && (i+n == len(b) || !alnum(b[i+n]))
}

// move renames a folder, through git in a git work tree so that it records
// the move, else on the file system.
func move(from, to string) error {
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("%s is there already", to)
	}
	if err := exec.Command("git", "mv", from, to).Run(); err == nil {
		return nil
	}
	return os.Rename(from, to)
}
