package main

import (
	"bytes"
	"fmt"
	"go/format"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// example is the example resource as this tree names it now. A resource
// rename rewrites this line too, so that the next one starts from the new
// name. Package is the Go package that decides it, and Type its type there
// (the template's are demo and Request, so demo.Request reads "demo request").
var example = resource{Singular: "demo request", Plural: "demo requests", Package: "demo", Type: "Request"}

var exampleRE = regexp.MustCompile(`(?m)^var example = resource\{.*\}$`)

// resource is a resource's name: its words (one or two, lowercase, joined
// by a space), and its Go package and type.
type resource struct {
	Singular, Plural string
	Package, Type    string
}

// leaves says what a rename of from leaves as it is.
func leaves(from resource) string {
	var alone string
	if words := strings.Fields(from.Singular); len(words) > 1 {
		alone = fmt.Sprintf(`
  - the word %q alone, in prose and in names but the id, state and code words
    above: it may name something else there (an HTTP request, for "request");`, words[len(words)-1])
	}
	return `left as they are:` + alone + `
  - the review desk's wire words (internal/reviewdesk/wire.go: its routes, headers,
    topic, note), but for the submission's id, which names the resource;
  - chi's middleware.RequestID;
  - scripts/rename, whose rules and tests show the template's words`
}

var (
	wordRE   = regexp.MustCompile(`^[a-z]+([-_][a-z]+)?$`)
	foreign  = []string{"middleware.RequestID"} // other projects' names that hold the words
	idSuffix = [][]string{{"ids"}, {"id"}, {"state"}, {"not", "cancellable"}}
)

// newResource is the resource named singular (ticket, support-ticket), with
// plural, or the singular's plural when it is empty.
func newResource(singular, plural string) (resource, error) {
	if !wordRE.MatchString(singular) {
		return resource{}, fmt.Errorf("the resource %q is not a lowercase word, or two joined by '-' or '_' (ticket, support-ticket)", singular)
	}
	words := strings.FieldsFunc(singular, func(r rune) bool { return r == '-' || r == '_' })
	if plural == "" {
		plural = strings.Join(words[:len(words)-1], " ")
		plural = strings.TrimSpace(plural + " " + pluralOf(words[len(words)-1]))
	} else {
		if !wordRE.MatchString(plural) {
			return resource{}, fmt.Errorf("the plural %q is not a lowercase word, or two joined by '-' or '_'", plural)
		}
		pw := strings.FieldsFunc(plural, func(r rune) bool { return r == '-' || r == '_' })
		if len(pw) != len(words) {
			return resource{}, fmt.Errorf("the plural %q has not as many words as %q", plural, singular)
		}
		plural = strings.Join(pw, " ")
	}
	r := resource{Singular: strings.Join(words, " "), Plural: plural}
	r.Package = strings.Join(words, "")
	r.Type = pascal(words)
	for _, name := range []string{r.Package, camel(words), camel(strings.Fields(plural))} {
		if token.IsKeyword(name) {
			return resource{}, fmt.Errorf("the resource %q would name Go things %q, a keyword of Go", singular, name)
		}
	}
	return r, nil
}

// sharesNoWord refuses a rename where the service's name is one of the
// resource's spellings (the service orders, the resource order): it could
// not tell the two apart. Renaming both in one call from the template never
// meets it.
func sharesNoWord(from resource, service string) error {
	names := []string{service, ident(service), strings.ToUpper(ident(service))}
	for _, words := range []string{from.Singular, from.Plural} {
		for _, s := range spellings(strings.Fields(words), true) {
			if slices.Contains(names, s) {
				return fmt.Errorf("the service %s and the resource %s share a name: a rename cannot tell them apart, rename them by hand from here", service, words)
			}
		}
	}
	return nil
}

// pluralOf is English's regular plural of a noun.
func pluralOf(w string) string {
	switch {
	case strings.HasSuffix(w, "s"), strings.HasSuffix(w, "x"), strings.HasSuffix(w, "z"),
		strings.HasSuffix(w, "ch"), strings.HasSuffix(w, "sh"):
		return w + "es"
	case len(w) > 1 && strings.HasSuffix(w, "y") && !strings.ContainsRune("aeiou", rune(w[len(w)-2])):
		return w[:len(w)-1] + "ies"
	}
	return w + "s"
}

func capital(w string) string { return strings.ToUpper(w[:1]) + w[1:] }

func pascal(words []string) string {
	var b strings.Builder
	for _, w := range words {
		b.WriteString(capital(w))
	}
	return b.String()
}

func camel(words []string) string { return words[0] + pascal(words[1:]) }

// spellings are a name's words in each case form: snake, SNAKE, Pascal and
// camel, and with prose also kebab and prose (plain, capitalized, titled).
func spellings(words []string, prose bool) []string {
	forms := []string{strings.Join(words, "_"), strings.ToUpper(strings.Join(words, "_")), pascal(words), camel(words)}
	if prose {
		titled := make([]string, len(words))
		for i, w := range words {
			titled[i] = capital(w)
		}
		forms = append(forms, strings.Join(words, "-"),
			strings.Join(words, " "), capital(strings.Join(words, " ")), strings.Join(titled, " "))
	}
	return forms
}

// rule is one spelling of the old name and the same spelling of the new.
type rule struct {
	old, new string
	goOnly   bool   // only in Go files
	under    string // only in files under this folder
	tight    bool   // lowercase start: not after '_' or '-' either (a word of another name)
}

// resourceRules are the spellings of from and their replacements in to:
//   - the name, singular and plural, in every case form (demo request,
//     DemoRequests, demo_requests, demo-request: ticket, Tickets, tickets,
//     ticket), inside longer names too (create_demo_request, handleGetDemoRequest);
//   - the id, state and code words, which the template spells with the
//     name's last word alone (requestId, request_id, RequestID,
//     request_state, request_not_cancellable): ticketId, ticket_id, …;
//   - the business package: its folder (internal/demo), its clause and
//     qualifier (package demo, demo.Service), its file (demo.go), its
//     type (demo.Request, Request in its folder) and its exported word
//     in Go (Deps.Demo).
func resourceRules(from, to resource) []rule {
	var rules []rule
	add := func(old, nw []string, prose bool) {
		for i, o := range spellings(old, prose) {
			rules = append(rules, rule{old: o, new: spellings(nw, prose)[i], tight: !prose})
		}
	}
	add(strings.Fields(from.Plural), strings.Fields(to.Plural), true)
	add(strings.Fields(from.Singular), strings.Fields(to.Singular), true)
	// The id, state and code words: as names only, since in prose "a request
	// id" is as often an HTTP request's.
	last := strings.Fields(from.Singular)
	last = last[len(last)-1:]
	for _, s := range idSuffix {
		add(append(slices.Clone(last), s...), append(strings.Fields(to.Singular), s...), false)
		if s[0] == "id" || s[0] == "ids" { // Go writes ID, IDs
			up := "ID" + s[0][2:]
			rules = append(rules,
				rule{old: pascal(last) + up, new: to.Type + up, tight: true},
				rule{old: camel(last) + up, new: camel(strings.Fields(to.Singular)) + up, tight: true})
		}
	}
	rules = append(rules,
		rule{old: from.Package + "." + from.Type, new: to.Package + "." + to.Type},
		rule{old: "internal/" + from.Package, new: "internal/" + to.Package},
		rule{old: "package " + from.Package, new: "package " + to.Package},
		rule{old: "Package " + from.Package, new: "Package " + to.Package, goOnly: true},
		rule{old: from.Package + ".go", new: to.Package + ".go", tight: true},
		rule{old: from.Package + "_test.go", new: to.Package + "_test.go", tight: true},
		rule{old: capital(from.Package), new: to.Type, goOnly: true},
		rule{old: from.Type, new: to.Type, under: "internal/" + from.Package},
	)
	for _, f := range foreign {
		rules = append(rules, rule{old: f, new: f})
	}
	// from.Package + "." before an exported name: demo.Service.
	for c := 'A'; c <= 'Z'; c++ {
		rules = append(rules, rule{old: from.Package + "." + string(c), new: to.Package + "." + string(c)})
	}
	sort.SliceStable(rules, func(i, j int) bool { return len(rules[i].old) > len(rules[j].old) })
	return rules
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// fits reports whether old, at b[i:], is a whole name or a whole part of
// one: not after a letter or digit when it starts lowercase (nor after '_'
// or '-' when tight), not before a lowercase letter or digit when it ends
// in one (an uppercase letter starts the next word of a Go name), not
// before a digit or an uppercase letter that starts no word when it ends in
// an uppercase one.
func fits(b []byte, i int, r rule) bool {
	if !bytes.HasPrefix(b[i:], []byte(r.old)) {
		return false
	}
	if i > 0 {
		p := b[i-1]
		switch {
		case isLower(r.old[0]) && (isLower(p) || isUpper(p) || isDigit(p)):
			return false
		case isLower(r.old[0]) && r.tight && (p == '_' || p == '-'):
			return false
		case isUpper(r.old[0]) && (r.tight || r.goOnly || r.under != "") && isUpper(p):
			return false
		case (r.goOnly || r.under != "") && (isLower(p) || isDigit(p)):
			return false // Demo, Request: a name of their own, not a part of another
		case r.under != "" && p == '.':
			return false // another package's Request
		}
	}
	if j := i + len(r.old); j < len(b) {
		n, e := b[j], r.old[len(r.old)-1]
		switch {
		case (isLower(e) || isDigit(e)) && (isLower(n) || isDigit(n)):
			return false
		case isUpper(e) && isDigit(n), isUpper(e) && isUpper(n) && (j+1 == len(b) || !isLower(b[j+1])):
			return false // RequestIDs is another word, RequestIDIsAnError not
		case (r.goOnly || r.under != "") && (isLower(n) || isUpper(n) || isDigit(n)):
			return false
		}
	}
	return true
}

// renameResource renames the tree's example resource to: every text file's
// words (replaceResource), file names, and the example line above. It skips
// what renameModule skips, and nested modules. dir is the tool's own folder.
func renameResource(to resource, dir string) error {
	from := example
	if from == to {
		fmt.Printf("the example resource is %s already: nothing to rename\n", to.Singular)
		return nil
	}
	rules := resourceRules(from, to)
	var changed int
	var moves [][2]string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		slash := filepath.ToSlash(path)
		if d.IsDir() {
			switch {
			case d.Name() == ".git" || d.Name() == "bin" || d.Name() == ".data" || d.Name() == "node_modules", slash == dir:
				return filepath.SkipDir
			case path != ".":
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a module of its own (conformance/)
				}
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), "LICENSE") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) < 0 { // text
			if out := replaceResource(b, rules, slash); !bytes.Equal(out, b) {
				if strings.HasSuffix(path, ".go") {
					if f, err := format.Source(out); err == nil {
						out = f // names of another length: gofmt aligns them again
					}
				}
				if err := os.WriteFile(path, out, 0o644); err != nil {
					return err
				}
				changed++
			}
		}
		if moved := string(replaceResource([]byte(slash), rules, slash)); moved != slash {
			moves = append(moves, [2]string{slash, moved})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range moves {
		if err := moveFile(m[0], m[1]); err != nil {
			return err
		}
		fmt.Printf("%s is now %s\n", m[0], m[1])
	}
	self := filepath.Join(filepath.FromSlash(dir), "resource.go")
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	if !exampleRE.Match(b) {
		return fmt.Errorf("%s has no line var example = resource{…}: the next rename would not know the resource", self)
	}
	line := fmt.Sprintf("var example = resource{Singular: %q, Plural: %q, Package: %q, Type: %q}", to.Singular, to.Plural, to.Package, to.Type)
	if err := os.WriteFile(self, exampleRE.ReplaceAll(b, []byte(line)), 0o644); err != nil {
		return err
	}
	fmt.Printf("the example resource %s (%s) is now %s (%s), package %s, type %s.%s: %d files changed, %d moved; the id, state and code words follow (%s_id, %s_not_cancellable)\n%s\n",
		from.Singular, from.Plural, to.Singular, to.Plural, to.Package, to.Package, to.Type, changed, len(moves),
		strings.ReplaceAll(to.Singular, " ", "_"), strings.ReplaceAll(to.Singular, " ", "_"), leaves(from))
	return nil
}

// replaceResource applies rules to b, the text of the file at path, in one
// pass: at each place the longest rule that fits. Before a new name that
// starts with a vowel, "a " becomes "an ", and the other way round.
func replaceResource(b []byte, rules []rule, path string) []byte {
	isGo := strings.HasSuffix(path, ".go")
	var out bytes.Buffer
	for i := 0; i < len(b); {
		var r *rule
		for k := range rules {
			c := &rules[k]
			if c.goOnly && !isGo || c.under != "" && !strings.HasPrefix(path, c.under+"/") {
				continue
			}
			if fits(b, i, *c) {
				r = c
				break
			}
		}
		if r == nil {
			out.WriteByte(b[i])
			i++
			continue
		}
		article(&out, r.old, r.new)
		out.WriteString(r.new)
		i += len(r.old)
	}
	return out.Bytes()
}

// article makes the "a" or "an" just written before old fit new.
func article(out *bytes.Buffer, old, nw string) {
	vowel := func(s string) bool { return strings.ContainsRune("aeioAEIO", rune(s[0])) }
	if vowel(old) == vowel(nw) {
		return
	}
	o := out.Bytes()
	for _, a := range []string{"a ", "A ", "an ", "An "} {
		if !bytes.HasSuffix(o, []byte(a)) {
			continue
		}
		if k := len(o) - len(a); k > 0 && (isLower(o[k-1]) || isUpper(o[k-1])) {
			continue
		}
		out.Truncate(len(o) - len(a))
		if vowel(nw) {
			out.WriteString(a[:1] + "n ")
		} else {
			out.WriteString(a[:1] + " ")
		}
		return
	}
}

// moveFile moves a file, through git in a git work tree, and removes the
// folders it leaves empty.
func moveFile(from, to string) error {
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("%s is there already", to)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if err := move(from, to); err != nil {
		return err
	}
	for dir := filepath.Dir(from); dir != "."; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty
		}
	}
	return nil
}
