package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStrip(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"nothing marked", "a\nb\n", "a\nb\n"},
		{"a block", "a\n\t// demo-only{ why\nb\n\t// }demo-only\nc\n", "a\nc\n"},
		{"nested blocks", "a\n# demo-only{\nb\n# demo-only{\nc\n# }demo-only\nd\n# }demo-only\ne\n", "a\ne\n"},
		{"a line", "a\nb // demo-only\nc\n", "a\nc\n"},
		{"a shell or make line", "a\nb # demo-only\n", "a\n"},
		{"the words in prose stay", "the demo-only parts\n", "the demo-only parts\n"},
		{"a copy-only line", "# copy-only: run: build\n# copy-only: \techo\n", "run: build\n\techo\n"},
		{"no last newline", "a\nb", "a\nb"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := strip([]byte(tt.in))
			if err != nil || string(got) != tt.want {
				t.Fatalf("strip(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	for _, in := range []string{"// demo-only{\na\n", "a\n// }demo-only\n"} {
		if _, err := strip([]byte(in)); err == nil {
			t.Errorf("strip(%q) took an unbalanced block", in)
		}
	}
}

func TestDropped(t *testing.T) {
	c := copier{drop: parseList("# a comment\ncmd/demo-bench/\ndocs/*.svg\ninternal/demo/expedite.go # the expedite\n")}
	for file, want := range map[string]bool{
		"cmd/demo-bench/main.go":       true,
		"cmd/demo-bench-x/main.go":     false,
		"docs/chaos-a.svg":             true,
		"docs/sub/chaos-a.svg":         false,
		"internal/demo/expedite.go":    true,
		"internal/demo/demo.go":        false,
		"internal/demo/expedite.go.md": false,
	} {
		if got := c.dropped(file); got != want {
			t.Errorf("dropped(%s) = %v, want %v", file, got, want)
		}
	}
}

// TestListNamesFiles: every entry of demo-only.txt names a file or folder
// of the repository, so the list cannot keep a name the tree lost.
func TestListNamesFiles(t *testing.T) {
	files, err := listFiles("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parseList(demoOnlyList) {
		c := copier{drop: []string{p}}
		found := false
		for _, f := range files {
			if c.dropped(f) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("demo-only.txt names %s, which matches no file", p)
		}
	}
}

func TestUnlink(t *testing.T) {
	c := copier{drop: []string{"docs/steps.md", "internal/reviewdesk/provider/"}}
	in := "see [steps](steps.md#x), [how](how-it-works.md), [desk](../internal/reviewdesk/provider/provider.go), [go](https://go.dev)"
	want := "see steps, [how](how-it-works.md), desk, [go](https://go.dev)"
	if got := string(c.unlink("docs/running.md", []byte(in))); got != want {
		t.Fatalf("unlink = %q, want %q", got, want)
	}
}

// TestCopy writes a copy of a small tree: the demo-only parts are left
// out, the module path is rewritten, Go files are formatted.
func TestCopy(t *testing.T) {
	src, dest := t.TempDir(), t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module github.com/old/mod\n")
	write("a.go", "package a\n\nimport (\n\t\"github.com/old/mod/b\"\n\t\"github.com/old/mod/demo\" // demo-only\n)\n\nvar x = map[string]int{\n\t\"a\":      1,\n\t\"longer\": 2, // demo-only\n}\n\nvar _ = b.X\n")
	write("demo/d.go", "package demo\n")
	c := copier{drop: []string{"demo/"}, oldModule: "github.com/old/mod", newModule: "example.com/new"}
	n, err := c.copyTree(src, dest, []string{"go.mod", "a.go", "demo/d.go"})
	if err != nil || n != 2 {
		t.Fatalf("copyTree = %d, %v; want 2 files", n, err)
	}
	got, _ := os.ReadFile(filepath.Join(dest, "a.go"))
	want := "package a\n\nimport (\n\t\"example.com/new/b\"\n)\n\nvar x = map[string]int{\n\t\"a\": 1,\n}\n\nvar _ = b.X\n"
	if string(got) != want {
		t.Fatalf("a.go in the copy:\n%s\nwant:\n%s", got, want)
	}
	if mod, _ := os.ReadFile(filepath.Join(dest, "go.mod")); !strings.Contains(string(mod), "module example.com/new") {
		t.Fatalf("go.mod in the copy: %s", mod)
	}
	if _, err := os.Stat(filepath.Join(dest, "demo")); !os.IsNotExist(err) {
		t.Fatalf("the demo-only folder was copied: %v", err)
	}
}
