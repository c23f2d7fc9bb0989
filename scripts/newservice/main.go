// Command newservice writes the bare template of demo-api under a new
// module path: the service's core, the create and the cancel, with every
// demo-only part left out. What is demo-only is written in demo-only.txt,
// beside this file, and in marked regions of the kept files.
//
//	go run ./scripts/newservice -dest ../orders -module example.com/acme/orders
//
// (make new-service DEST=../orders MODULE=example.com/acme/orders.) It
// copies the files git knows of (tracked, or new and not ignored), so a
// build's output and the development database never travel.
package main

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

//go:embed demo-only.txt
var demoOnlyList string

//go:embed README.copy.md
var copyReadme string

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "new-service:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("new-service", flag.ContinueOnError)
	dest := fs.String("dest", "", "the folder to write the copy to (must not exist, or be empty)")
	module := fs.String("module", "", "the copy's module path, as example.com/acme/orders")
	src := fs.String("src", ".", "the repository to copy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dest == "" || *module == "" {
		return errors.New("usage: new-service -dest DIR -module PATH (make new-service DEST=DIR MODULE=PATH)")
	}
	if !validModule(*module) {
		return fmt.Errorf("%q is not a module path (as example.com/acme/orders)", *module)
	}
	if entries, err := os.ReadDir(*dest); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: the copy goes into a new folder", *dest)
	}
	files, err := listFiles(*src)
	if err != nil {
		return err
	}
	oldModule, err := modulePath(filepath.Join(*src, "go.mod"))
	if err != nil {
		return err
	}
	c := copier{drop: parseList(demoOnlyList), oldModule: oldModule, newModule: *module}
	n, err := c.copyTree(*src, *dest, files)
	if err != nil {
		return err
	}
	readme := strings.ReplaceAll(copyReadme, "MODULE_PATH", *module)
	if err := os.WriteFile(filepath.Join(*dest, "README.md"), []byte(readme), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "new-service: %d files written to %s, module %s\n", n+1, *dest, *module)
	return nil
}

var modulePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.\-]*(/[A-Za-z0-9._~\-]+)+$`)

func validModule(m string) bool { return modulePattern.MatchString(m) }

// listFiles is every file git knows of under src: tracked, or new and not
// ignored.
func listFiles(src string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", src, err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		// A file deleted in the work tree is still listed as tracked.
		if _, err := os.Lstat(filepath.Join(src, f)); err == nil {
			files = append(files, f)
		}
	}
	return files, nil
}

func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s names no module", gomod)
}

// parseList reads demo-only.txt: an entry a line, # starts a comment.
func parseList(s string) []string {
	var drop []string
	for line := range strings.SplitSeq(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			drop = append(drop, line)
		}
	}
	return drop
}

type copier struct {
	drop                 []string
	oldModule, newModule string
}

// dropped reports whether file (slash-separated, relative to the root) is
// demo-only: named by an entry, or under a folder an entry names.
func (c copier) dropped(file string) bool {
	for _, p := range c.drop {
		if dir, ok := strings.CutSuffix(p, "/"); ok {
			if strings.HasPrefix(file, dir+"/") {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, file); ok {
			return true
		}
	}
	return false
}

func (c copier) copyTree(src, dest string, files []string) (int, error) {
	n := 0
	for _, f := range files {
		if c.dropped(f) {
			continue
		}
		from, to := filepath.Join(src, filepath.FromSlash(f)), filepath.Join(dest, filepath.FromSlash(f))
		info, err := os.Stat(from)
		if err != nil {
			return n, err
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return n, err
		}
		if isText(b) {
			if b, err = strip(b); err != nil {
				return n, fmt.Errorf("%s: %w", f, err)
			}
			b = bytes.ReplaceAll(b, []byte(c.oldModule), []byte(c.newModule))
		}
		if strings.HasSuffix(f, ".md") {
			b = c.unlink(f, b)
		}
		if strings.HasSuffix(f, ".go") {
			// What was left out may leave a blank line too many, or
			// comments aligned to a line that is gone.
			if b, err = format.Source(b); err != nil {
				return n, fmt.Errorf("%s after its demo-only lines were left out: %w", f, err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return n, err
		}
		if err := os.WriteFile(to, b, info.Mode().Perm()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)

// unlink turns each link of the Markdown file f to a file left out into
// its bare text, so the copy's pages link only to what it holds.
func (c copier) unlink(f string, b []byte) []byte {
	return mdLink.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := mdLink.FindSubmatch(m)
		target, _, _ := strings.Cut(string(sub[2]), "#")
		if target == "" || strings.Contains(target, "://") {
			return m
		}
		if c.dropped(path.Join(path.Dir(f), target)) {
			return sub[1]
		}
		return m
	})
}

func isText(b []byte) bool { return !bytes.Contains(b, []byte{0}) }

var lineMarker = regexp.MustCompile(`(//|#|--)\s*demo-only\s*$`)

// strip leaves out the marked demo-only lines of a kept file: the lines
// from one holding "demo-only{" to one holding "}demo-only", both included,
// and each line that ends with the comment "demo-only". A line that starts
// with "# copy-only: " is the copy's own (a Makefile's target in place of
// the demo's): it is kept without that prefix.
func strip(b []byte) ([]byte, error) {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	depth, n, open := 0, 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.Contains(line, "demo-only{"):
			if depth == 0 {
				open = n
			}
			depth++
			continue
		case strings.Contains(line, "}demo-only"):
			if depth == 0 {
				return nil, fmt.Errorf("line %d: }demo-only without its demo-only{", n)
			}
			depth--
			continue
		}
		if depth > 0 || lineMarker.MatchString(line) {
			continue
		}
		line, _ = strings.CutPrefix(line, "# copy-only: ")
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if depth > 0 {
		return nil, fmt.Errorf("line %d: demo-only{ is never closed", open)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// A file without a last newline keeps its last line as it was.
	if len(b) > 0 && b[len(b)-1] != '\n' && out.Len() > 0 {
		out.Truncate(out.Len() - 1)
	}
	return out.Bytes(), nil
}
