package browsertest

import (
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestLeavesNoScratch: a browser started, given a page and stopped leaves
// nothing in the temporary folder: no profile, and none of the browser's
// own temporary files (a killed Chromium leaves its single-instance lock
// folder there).
func TestLeavesNoScratch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drives a browser")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for range 2 {
		b, err := launch()
		if err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(b.ctx, chromedp.Navigate("about:blank")); err != nil {
			t.Fatal(err)
		}
		if err := b.close(); err != nil {
			t.Fatal(err)
		}
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the browser left %s in the temporary folder", e.Name())
	}
}
