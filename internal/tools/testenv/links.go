package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// CheckLinks fails the test unless every relative link of the Markdown
// pages names a file that is there, and every #anchor a heading of its
// page.
func CheckLinks(t *testing.T, pages ...string) {
	t.Helper()
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which is not there", page, target)
					continue
				}
			}
			if anchor != "" && !hasHeading(t, path, anchor) {
				t.Errorf("%s links to %s, a heading that is not there", page, target)
			}
		}
	}
}

// hasHeading reports whether the Markdown file has a heading whose GitHub
// anchor is anchor.
func hasHeading(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile("[^a-z0-9 _-]")
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimLeft(h, "#")
			if strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-") == anchor {
				return true
			}
		}
	}
	return false
}
