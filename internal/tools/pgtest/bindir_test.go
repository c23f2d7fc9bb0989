package pgtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinSearchOrder runs the lookup of the server binaries over fake
// folder trees: pg_config first, then PATH, then the package folders in
// their order, newest version first within each; a folder missing one of
// initdb, pg_ctl and postgres is passed over.
func TestBinSearchOrder(t *testing.T) {
	const (
		debian15   = "usr/lib/postgresql/15/bin"
		debian13   = "usr/lib/postgresql/13/bin"
		debian9    = "usr/lib/postgresql/9.6/bin"
		brew14     = "opt/homebrew/opt/postgresql@14/bin"
		brew16     = "opt/homebrew/opt/postgresql@16/bin"
		brewIntel  = "usr/local/opt/postgresql@17/bin"
		pgApp10    = "Applications/Postgres.app/Contents/Versions/10/bin"
		pgApp16    = "Applications/Postgres.app/Contents/Versions/16/bin"
		cellar     = "opt/homebrew/Cellar/postgresql@15/15.8/bin"
		pathBin    = "opt/homebrew/bin" // links to cellar
		incomplete = "!"                // suffix: the folder lacks postgres
	)
	for _, tc := range []struct {
		name     string
		dirs     []string // folders with the three binaries (or, ending in "!", without postgres)
		pgConfig string   // what pg_config --bindir prints ("" without pg_config)
		path     bool     // initdb and pg_ctl on PATH, as links into cellar
		want     string   // "" for none
	}{
		{name: "nothing", want: ""},
		{name: "debian, newest first", dirs: []string{debian9, debian13, debian15}, want: debian15},
		{name: "9.6 is older than 13", dirs: []string{debian9, debian13}, want: debian13},
		{name: "an incomplete folder is passed over", dirs: []string{debian13, debian15 + incomplete}, want: debian13},
		{name: "pg_config before everything", dirs: []string{debian15, brew14, cellar}, pgConfig: brew14, path: true, want: brew14},
		{name: "pg_config pointing at an incomplete folder", dirs: []string{debian15, brew14 + incomplete}, pgConfig: brew14, want: debian15},
		{name: "PATH before the package folders, links resolved", dirs: []string{debian15, cellar}, path: true, want: cellar},
		{name: "debian before homebrew", dirs: []string{brew16, debian13}, want: debian13},
		{name: "homebrew newest first", dirs: []string{brew14, brew16}, want: brew16},
		{name: "homebrew on Apple silicon before Intel", dirs: []string{brewIntel, brew14}, want: brew14},
		{name: "homebrew on Intel", dirs: []string{brewIntel, pgApp16}, want: brewIntel},
		{name: "Postgres.app newest first", dirs: []string{pgApp10, pgApp16}, want: pgApp16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range tc.dirs {
				names := []string{"initdb", "pg_ctl", "postgres"}
				if strings.HasSuffix(d, incomplete) {
					d, names = strings.TrimSuffix(d, incomplete), names[:2]
				}
				for _, n := range names {
					writeExec(t, filepath.Join(root, d, exeName(n)))
				}
			}
			if tc.path {
				for _, n := range []string{"initdb", "pg_ctl"} {
					link := filepath.Join(root, pathBin, exeName(n))
					if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(filepath.Join(root, cellar, exeName(n)), link); err != nil {
						t.Fatal(err)
					}
				}
			}
			var globs []string
			for _, g := range binGlobs {
				globs = append(globs, filepath.Join(root, g))
			}
			b := binSearch{
				pgConfig: func() string {
					if tc.pgConfig == "" {
						return ""
					}
					return filepath.Join(root, tc.pgConfig)
				},
				lookPath: func(name string) (string, error) {
					p := filepath.Join(root, pathBin, exeName(name))
					if _, err := os.Lstat(p); err != nil {
						return "", exec.ErrNotFound
					}
					return p, nil
				},
				globs: globs,
			}
			got, err := b.find()
			if tc.want == "" {
				if err == nil {
					t.Fatalf("found %s in an empty tree", got)
				}
				if !strings.Contains(err.Error(), "pg_config --bindir") || !strings.Contains(err.Error(), "Postgres.app") {
					t.Errorf("the error does not say where it looked: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := evalSymlinks(t, got), evalSymlinks(t, filepath.Join(root, tc.want)); got != want {
				t.Errorf("found %s, want %s", got, want)
			}
		})
	}
}

// TestInstallHint names every way to get a PostgreSQL.
func TestInstallHint(t *testing.T) {
	for _, want := range []string{"apt-get install postgresql", "brew install postgresql@", "Postgres.app", "windows", "Docker"} {
		if !strings.Contains(installHint, want) {
			t.Errorf("installHint does not mention %q: %s", want, installHint)
		}
	}
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"9.6", "15", true}, {"15", "9.6", false}, {"15", "16", true}, {"16", "16", false},
		{"16", "16.2", true}, {"16", "latest", true}, {"latest", "16", false},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("versionLess(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func writeExec(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func evalSymlinks(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if errors.Is(err, os.ErrNotExist) {
		return p
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}
