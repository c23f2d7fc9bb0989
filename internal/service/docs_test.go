package service

import (
	"path/filepath"
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDocsLinks: every relative link of the README and docs/*.md names a
// file of the repository, and every #anchor a heading of its page.
func TestDocsLinks(t *testing.T) {
	pages, _ := filepath.Glob("../../docs/*.md")
	testenv.CheckLinks(t, append(pages, "../../README.md")...)
}
