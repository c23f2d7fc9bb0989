// Package browsertest runs a real headless Chromium (or Chrome) for the
// browser tests, the way pgtest runs a real PostgreSQL: it finds the
// system's browser, downloads nothing, and fails with what to install when
// there is none. Each test gets a tab of its own, in a browser context of
// its own (its own sessionStorage), that fails it rather than hang, and
// fails it if the page wrote a console error, threw, or broke its
// Content-Security-Policy. The browser leaves nothing in the temporary
// folder. Only tests import it.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// candidates are the browsers tried, by name on PATH or at their usual
// places on macOS and Windows, after $CHROME_PATH.
func candidates() []string {
	names := []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"}
	switch runtime.GOOS {
	case "darwin":
		names = append(names,
			"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
			"/Applications/Chromium.app/Contents/MacOS/Chromium")
	case "windows":
		for _, dir := range []string{os.Getenv("ProgramFiles"), os.Getenv("ProgramFiles(x86)"), os.Getenv("LocalAppData")} {
			if dir != "" {
				names = append(names, filepath.Join(dir, `Google\Chrome\Application\chrome.exe`))
			}
		}
	}
	return names
}

// Find returns the path of the browser the tests drive.
func Find() (string, error) {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return exec.LookPath(p)
	}
	for _, c := range candidates() {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("browsertest: no Chromium or Chrome found: run scripts/setup.sh (make test does), or install one (Debian, Ubuntu: apt-get install chromium; macOS: Google Chrome or brew install --cask chromium; Windows: Google Chrome), or set CHROME_PATH to its binary")
}

// browser is the one browser of the test binary, started by the first tab.
var browser struct {
	once sync.Once
	*instance
	err error
}

func start() { browser.instance, browser.err = launch() }

// Close stops the browser, if a test started it, and removes what it wrote
// in the temporary folder; call it from TestMain. It returns an error when
// something of the browser's is left there.
func Close() error {
	if browser.instance == nil {
		return nil
	}
	return browser.close()
}

// instance is one running browser.
type instance struct {
	ctx   context.Context
	close func() error
}

// launch starts a browser. What it writes in the temporary folder is
// removed by its close, on a test's failure too: the profile is chromedp's
// (made for this browser, and removed once the browser and its children
// are gone), and the browser's own temporary files (a folder per start for
// its single-instance lock, which a killed browser never removes) go to a
// browsertest-* folder of ours, through TMPDIR.
func launch() (*instance, error) {
	path, err := Find()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "browsertest-")
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.WindowSize(1000, 1200),
		// No calls to the outside: this machine, a CI runner or a laptop in
		// a workshop room may have no network.
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	stop := func() error {
		cancel()
		cancelAlloc() // returns once the browser is gone and its profile removed
		return removeAll(tmp)
	}
	if err := chromedp.Do(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("browsertest: start %s: %w", path, err), stop())
	}
	return &instance{ctx: ctx, close: stop}, nil
}

// removeAll removes dir, trying again for a few seconds while a child of
// the browser that outlived it still writes there.
func removeAll(dir string) error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = os.RemoveAll(dir); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("browsertest: remove the browser's temporary files: %w", err)
	}
	return nil
}

// Tab is one tab of the browser.
type Tab struct {
	Ctx context.Context // for chromedp.Run and chromedp.Do

	mu       sync.Mutex
	forgiven []string
}

// NewTab opens a tab, which closes when t ends or after TabLimit. The test
// fails if the tab's pages write a console error, throw, or break their
// Content-Security-Policy. An error of the network log, such as "the
// server responded with a status of 409", is the answer a test asked for,
// not a fault of the page, and is not counted.
func NewTab(t testing.TB) *Tab {
	t.Helper()
	browser.once.Do(start)
	if browser.err != nil {
		t.Fatal(browser.err)
	}
	return open(t, browser.ctx, chromedp.WithNewBrowserContext())
}

// TabLimit bounds a tab's life: past it, every action on the tab fails
// with context.DeadlineExceeded, so a page that never does what a test
// waits for fails that test instead of hanging the run.
const TabLimit = 3 * time.Minute

// Sibling opens another tab beside tab, in its browser context: it shares
// the origin's locks and storage, but not sessionStorage, as a second tab
// a person opens does.
func (tab *Tab) Sibling(t testing.TB) *Tab {
	t.Helper()
	return open(t, tab.Ctx)
}

func open(t testing.TB, parent context.Context, opts ...chromedp.ContextOption) *Tab {
	t.Helper()
	limited, cancelLimit := context.WithTimeout(parent, TabLimit)
	ctx, cancelTab := chromedp.NewContext(limited, opts...)
	cancel := func() { cancelTab(); cancelLimit() }
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	tab := &Tab{Ctx: ctx}
	var faults []string
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if Fault(m) {
				faults = append(faults, m.String())
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		tab.mu.Lock()
		defer tab.mu.Unlock()
		for _, f := range faults {
			if !slices.ContainsFunc(tab.forgiven, func(s string) bool { return strings.Contains(f, s) }) {
				t.Errorf("the page wrote to the console: %s", f)
			}
		}
	})
	return tab
}

// Forgive lets the faults that contain s pass, for a test that causes them
// on purpose.
func (tab *Tab) Forgive(s string) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.forgiven = append(tab.forgiven, s)
}

// Fault reports whether a console message is a fault of the page: an
// uncaught exception, a console error, or a Content-Security-Policy
// violation, but not an error of the network log.
func Fault(m chromedp.ConsoleMessage) bool {
	switch {
	case m.IsException():
		return true
	case strings.Contains(m.Text, "Content Security Policy"):
		return true
	case m.Source == "network":
		return false
	}
	return m.Type == chromedp.ConsoleError
}

// Screenshot saves a PNG of what the tab shows as name.png: in $SCREENSHOTS_DIR when
// set (make screenshots writes the README's), else in the test's artifact
// directory.
func (tab *Tab) Screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(tab.Ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is no PNG", name)
	}
	dir := os.Getenv("SCREENSHOTS_DIR")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
