package main

import (
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/demo-api/demo-api/demo/internal/tools/browsertest"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// roomNames are the participants of the room tests.
var roomNames = []string{"ana", "ben", "cy", "dee"}

// TestWorkshopRoom: one server as a room runs it (WORKSHOP_ROOM=true, a
// review desk, the default TTL and lease), and four participants walk every
// step of demo-api workshop at the same moment, each with a token of their
// own: every step passes for every one of them. The external step included,
// though each sets the desk down and clears it again while the others'
// deliveries go on; expiry included, in seconds (Workshop-TTL), with no
// restart.
func TestWorkshopRoom(t *testing.T) {
	testenv.Long(t, "a long end-to-end walk (a workshop room)")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	base, db := testenv.ServeInProcess(t, run, "WORKSHOP_ROOM=true", "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=3", "DISPATCH_FIRST_RETRY=200ms")
	ctx := testenv.Context(t)
	outs := make([]*testenv.Buffer, len(roomNames))
	errs := make([]error, len(roomNames))
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i, name := range roomNames {
		outs[i] = &testenv.Buffer{}
		wg.Go(func() {
			<-begin
			errs[i] = run(ctx, []string{"workshop", "--base", base, "--token", "dev-" + name, "--all", "--provider", desk.URL},
				func(string) string { return "" }, outs[i], io.Discard)
		})
	}
	started := time.Now()
	close(begin)
	wg.Wait()
	t.Logf("four participants walked every step in %s", time.Since(started).Round(100*time.Millisecond))
	for i, name := range roomNames {
		out := outs[i].String()
		if errs[i] != nil || strings.Contains(out, "FAIL") || strings.Contains(out, "SKIP") {
			t.Errorf("%s's workshop --all: %v\n%s", name, errs[i], out)
			continue
		}
		if n := strings.Count(out, "PASS"); n != len(workshopSteps) {
			t.Errorf("%s: %d steps passed, want %d:\n%s", name, n, len(workshopSteps), out)
		}
	}
	// Each participant's requests are their own, and every delivery the
	// server recorded as submitted is at the desk once.
	var actors int
	if err := db.Get(&actors, `SELECT count(DISTINCT actor_id) FROM demo_requests WHERE actor_id IN ('dev-ana', 'dev-ben', 'dev-cy', 'dev-dee')`); err != nil || actors != 4 {
		t.Fatalf("%d participants hold requests (%v), want 4", actors, err)
	}
	var pending, submitted int
	if !testenv.Eventually(20*time.Second, func() bool {
		return db.Get(&pending, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == nil && pending == 0
	}) {
		t.Fatalf("%d deliveries still pending", pending)
	}
	if err := db.Get(&submitted, `SELECT count(*) FROM outbox WHERE kind = 'submit' AND state = 'submitted'`); err != nil {
		t.Fatal(err)
	}
	if n := desk.Submissions(t); n != submitted {
		t.Fatalf("the desk holds %d submissions, the server recorded %d submitted", n, submitted)
	}
}

// TestBrowserWorkshopRoom: two people in a room open the workshop page of
// one server (WORKSHOP_ROOM=true, a review desk, the default TTL), each in
// a browser context of their own; the page asks each for a name, and both
// run every step at the same moment: every step passes on both pages, the
// external step and expiry included, each under its own participant.
func TestBrowserWorkshopRoom(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	// The pages' resume step is the participant's: a completer that took the
	// stopped run first would answer the page's resent request 409.
	server, db := testenv.ServeInProcess(t, run, "WORKSHOP_ROOM=true", "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=3", "DISPATCH_FIRST_RETRY=200ms",
		"COMPLETE_INTERVAL=1h")
	names := roomNames[:2]
	pages := make([]*page, len(names))
	for i, name := range names {
		p := &page{t: t, db: db, rec: &recorder{}}
		p.base = p.rec.proxy(t, server)
		p.tab = browsertest.NewTab(t)
		p.ctx = p.tab.Ctx
		p.do(chromedp.Navigate(p.base+"/workshop"), chromedp.WaitVisible(chromedp.CSS("#step-expiry")))
		if label := p.eval(`document.querySelector('#token-label').textContent`); label != "Your name" {
			t.Fatalf("the room's page asks for %q, want a name", label)
		}
		p.do(chromedp.SendKeys(chromedp.CSS("#token"), name))
		if needs := p.needs(); needs != "" {
			t.Fatalf("the room's server meets every step's needs, yet the page shows:\n%s", needs)
		}
		pages[i] = p
	}
	started := time.Now()
	for _, p := range pages {
		p.do(chromedp.Click(chromedp.CSS("#run-all")))
	}
	for i, p := range pages {
		p.wait(`/passed/.test(document.querySelector('#summary').textContent)`, 2*time.Minute)
		verdicts := p.eval(`[...document.querySelectorAll('.step')].map(s => s.id + ' ' + s.querySelector('.verdict').textContent).join('\n')`)
		if n := strings.Count(verdicts, " PASS "); n != len(web.Steps()) {
			t.Errorf("%s: %d of %d steps passed:\n%s", names[i], n, len(web.Steps()), verdicts)
		}
		p.rec.mu.Lock()
		posts := slices.Clone(p.rec.posts)
		p.rec.mu.Unlock()
		if len(posts) == 0 {
			t.Fatalf("%s's page sent no POST", names[i])
		}
		for _, post := range posts {
			if post.auth != "Bearer dev-"+names[i] {
				t.Fatalf("%s's page sent Authorization %q, want Bearer dev-%s", names[i], post.auth, names[i])
			}
		}
	}
	t.Logf("two pages walked every step in %s", time.Since(started).Round(100*time.Millisecond))
	var actors int
	if err := db.Get(&actors, `SELECT count(DISTINCT actor_id) FROM demo_requests WHERE actor_id IN ('dev-ana', 'dev-ben')`); err != nil || actors != 2 {
		t.Fatalf("%d participants hold requests (%v), want 2", actors, err)
	}
}

// TestBrowserCreatePageInARoom: in a workshop room the create page asks for
// a name, and creates under the participant's token dev-<name>.
func TestBrowserCreatePageInARoom(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	server, db := testenv.ServeInProcess(t, run, "WORKSHOP_ROOM=true")
	p := &page{t: t, db: db, rec: &recorder{}}
	p.base = p.rec.proxy(t, server)
	p.tab = browsertest.NewTab(t)
	p.ctx = p.tab.Ctx
	p.do(chromedp.Navigate(p.base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	p.wait(`document.querySelector('#token-label').textContent === 'Your name'`, 10*time.Second)
	if kind := p.eval(`document.querySelector('#token').type`); kind != "text" {
		t.Fatalf("the name field is of type %q, want text", kind)
	}
	p.do(chromedp.SendKeys(chromedp.CSS("#token"), "ana"), chromedp.Click(chromedp.CSS("#sign-in-form button")),
		chromedp.WaitVisible(chromedp.CSS("#topic")))
	p.fill("billing", "from a room")
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	p.rec.mu.Lock()
	posts := slices.Clone(p.rec.posts)
	p.rec.mu.Unlock()
	if len(posts) == 0 || posts[0].auth != "Bearer dev-ana" {
		t.Fatalf("the page created under %+v, want Bearer dev-ana", posts)
	}
	var actor string
	if err := db.Get(&actor, `SELECT actor_id FROM demo_requests`); err != nil || actor != "dev-ana" {
		t.Fatalf("the request belongs to %q (%v), want dev-ana", actor, err)
	}
}
