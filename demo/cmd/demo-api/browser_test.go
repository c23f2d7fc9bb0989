package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/room"
	"github.com/demo-api/demo-api/demo/internal/tools/browsertest"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// The browser tests drive the pages in a real Chromium against demo-api
// serve on a real PostgreSQL, behind a recorder that counts what reached
// the server.

// page is one server and one tab on its create page, signed in as alice.
type page struct {
	t    *testing.T
	tab  *browsertest.Tab
	ctx  context.Context
	base string
	db   *sqlx.DB
	rec  *recorder
}

func openPage(t *testing.T, path string, env ...string) *page {
	t.Helper()
	server, db := testenv.ServeInProcess(t, run, env...)
	p := &page{t: t, db: db, rec: &recorder{}}
	p.base = p.rec.proxy(t, server)
	p.tab = browsertest.NewTab(t)
	p.ctx = p.tab.Ctx
	p.do(chromedp.Navigate(p.base + path))
	if path == "/" {
		p.do(chromedp.SendKeys(chromedp.CSS("#token"), testenv.TokenAlice), chromedp.Click(chromedp.CSS("#sign-in-form button")),
			chromedp.WaitVisible(chromedp.CSS("#topic")))
	}
	return p
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits until the JavaScript expression is true.
func (p *page) wait(expr string, timeout time.Duration) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		p.t.Fatalf("waiting for %s: %v", expr, err)
	}
}

func (p *page) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// state is the outcome on show: created, refused, outcome-unknown, or "".
func (p *page) state() string {
	return p.eval(`document.querySelector('#outcome').hidden ? '' : document.querySelector('#outcome').dataset.state`)
}

func (p *page) waitState(state string, timeout time.Duration) {
	p.t.Helper()
	expr := `!document.querySelector('#outcome').hidden && document.querySelector('#outcome').dataset.state === '` + state + `'`
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		shows, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`['#notice', '#outcome', '#attempts tbody']
			.map(s => s + ': ' + document.querySelector(s).innerText.replace(/\s+/g, ' ')).join('\n')`))
		p.t.Fatalf("waiting for the outcome %s: %v; the page shows:\n%s", state, err, shows)
	}
}

// detail is the value of an outcome detail, such as requestId or key.
func (p *page) detail(name string) string {
	return p.eval(`(document.querySelector('#outcome-details dd[data-name="` + name + `"]') || {}).textContent || ''`)
}

// set sets the value of the element sel, as a script would.
func set(sel, value string) chromedp.Action[chromedp.Void] {
	v, _ := json.Marshal(value)
	return chromedp.Evaluate[chromedp.Void](`document.querySelector('` + sel + `').value = ` + string(v))
}

// fill types the fields, as a person would.
func (p *page) fill(topic, note string) {
	p.t.Helper()
	p.do(set("#topic", ""), chromedp.SendKeys(chromedp.CSS("#topic"), topic),
		set("#note", ""), chromedp.SendKeys(chromedp.CSS("#note"), note))
}

// creates returns the keys and attempt numbers of the creates that reached
// the server.
func (p *page) creates() (keys, attempts []string) {
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	for _, post := range p.rec.posts {
		if post.path == "/v1/demo-requests" {
			keys, attempts = append(keys, post.key), append(attempts, post.attempt)
		}
	}
	return keys, attempts
}

// oneKey fails unless every create that reached the server carried one key,
// numbered 1, 2, …; it returns the key. An attempt may arrive twice: the
// browser itself sends a request again, unchanged, when a connection it
// reused closes without an answer (the page cannot turn that off, and the
// key makes it harmless).
func (p *page) oneKey() string {
	p.t.Helper()
	keys, attempts := p.creates()
	if len(keys) == 0 {
		p.t.Fatal("no create reached the server")
	}
	n := 0
	for i := range keys {
		a, _ := strconv.Atoi(attempts[i])
		if keys[i] != keys[0] || (a != n && a != n+1) || a == 0 {
			p.t.Fatalf("the creates carried keys %v, attempts %v; want one key, attempts 1..n", keys, attempts)
		}
		n = a
	}
	return keys[0]
}

func (p *page) rows() int { return testenv.Rows(p.t, p.db) }

// created checks that the page shows the one request of the database.
func (p *page) created() {
	p.t.Helper()
	var id string
	if err := p.db.Get(&id, `SELECT id FROM demo_requests`); err != nil {
		p.t.Fatalf("want one request: %v", err)
	}
	if got := p.detail("requestId"); got != id {
		p.t.Fatalf("the page shows request %q, the database holds %q", got, id)
	}
}

func TestBrowserDoubleClickAndEnterTwice(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	p := openPage(t, "/", "PROVIDER_URL="+desk.URL)
	presses := []struct {
		name  string
		press chromedp.Action[chromedp.Void]
	}{
		{"a double click", chromedp.DoubleClick(chromedp.CSS("#create-button"))},
		{"two clicks 20 ms apart", chromedp.Evaluate[chromedp.Void](
			`document.querySelector('#create-button').click(); setTimeout(() => document.querySelector('#create-form').requestSubmit(), 20)`)},
		{"Enter twice", chromedp.Steps(chromedp.KeyEvent("\r"), chromedp.KeyEvent("\r"))},
	}
	for i, c := range presses {
		p.rec.mu.Lock()
		p.rec.posts = nil
		p.rec.mu.Unlock()
		p.fill("double "+strconv.Itoa(i), "pressed twice")
		p.do(chromedp.Focus(chromedp.CSS("#topic")), c.press)
		p.waitState("created", 10*time.Second)
		p.oneKey()
		if keys, _ := p.creates(); len(keys) != 1 {
			t.Fatalf("%s: %d creates reached the server, want 1", c.name, len(keys))
		}
		if n := p.rows(); n != i+1 {
			t.Fatalf("%s: %d requests, want %d", c.name, n, i+1)
		}
	}
	// The created request's hand-over to the desk, as it moves.
	p.wait(`document.querySelector('#outcome-details dd[data-name="delivery"]').textContent === 'pending → submitted'`, 10*time.Second)
	if n := desk.Submissions(t); n != len(presses) {
		t.Fatalf("the desk holds %d submissions, want %d", n, len(presses))
	}
	p.tab.Screenshot(t, "created")
}

func TestBrowserReloadDuringAHeldAttempt(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	p.fill("reload", "the first attempt is held 1 s")
	p.do(set("#switch-delay", "1s"), chromedp.Click(chromedp.CSS("#create-button")))
	if !testenv.Eventually(5*time.Second, func() bool { keys, _ := p.creates(); return len(keys) == 1 }) {
		t.Fatal("the first attempt never reached the server")
	}
	p.do(chromedp.Reload())
	p.waitState("created", 10*time.Second)
	key := p.oneKey()
	if _, attempts := p.creates(); len(attempts) < 2 {
		t.Fatalf("attempts %v: the reloaded page sent nothing", attempts)
	}
	if p.rows() != 1 {
		t.Fatalf("%d requests after the reload, want 1", p.rows())
	}
	p.created()
	if notice := p.eval(`document.querySelector('#notice').textContent`); !strings.Contains(notice, key) {
		t.Fatalf("the page says %q, not that it resumed key %s", notice, key)
	}
}

// unknown sends an intent whose first attempt the server holds longer than
// the budget, and checks that the page says "outcome unknown" in time.
func (p *page) unknown(topic string) string {
	p.t.Helper()
	p.fill(topic, "held longer than the budget")
	p.do(set("#switch-delay", "8s"))
	start := time.Now()
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("outcome-unknown", 8*time.Second)
	if took := time.Since(start); took > 5*time.Second+1500*time.Millisecond {
		p.t.Fatalf("outcome unknown after %s, want the 5 s budget and a small margin", took)
	}
	key := p.oneKey()
	if got := p.detail("key"); got != key {
		p.t.Fatalf("the page shows key %q, the server saw %q", got, key)
	}
	return key
}

func TestBrowserTimeoutThenCheckStatus(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	key := p.unknown("timeout")
	p.tab.Screenshot(t, "outcome-unknown")
	sent, _ := p.creates()
	// A reload past the deadline shows the same outcome, and sends nothing.
	p.do(chromedp.Reload())
	p.waitState("outcome-unknown", 5*time.Second)
	if got := p.detail("key"); got != key {
		t.Fatalf("after the reload the page shows key %q, want %s", got, key)
	}
	// The first attempt still runs (8 s): Check status says so, then, once
	// it finished, shows the stored answer.
	for deadline := time.Now().Add(15 * time.Second); p.state() != "created"; {
		if time.Now().After(deadline) {
			t.Fatalf("Check status never showed the created request: %s", p.state())
		}
		p.do(chromedp.Click(chromedp.CSS("#check-status")), chromedp.Sleep(500*time.Millisecond))
	}
	p.created()
	if after, _ := p.creates(); len(after) != len(sent) {
		t.Fatalf("Check status sent %d creates; it must send none", len(after)-len(sent))
	}
}

// TestBrowserNeverSeenThenSendAgain: no attempt reaches the server; Check
// status finds the key never seen and offers Send again, which sends the
// same key.
func TestBrowserNeverSeenThenSendAgain(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	p.rec.setCut(true)
	p.fill("unreachable", "the server is out of reach")
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("outcome-unknown", 8*time.Second)
	key := p.oneKey()
	p.rec.setCut(false)
	p.do(chromedp.Click(chromedp.CSS("#check-status")))
	p.wait(`!document.querySelector('#send-again').hidden`, 5*time.Second)
	if status := p.detail("status"); !strings.Contains(status, "never seen") {
		t.Fatalf("Check status says %q, want never seen", status)
	}
	p.do(chromedp.Click(chromedp.CSS("#send-again")))
	p.waitState("created", 10*time.Second)
	if p.oneKey() != key || p.rows() != 1 {
		t.Fatalf("Send again: %d rows; want one, created with key %s", p.rows(), key)
	}
	p.created()
}

// TestBrowserSecondTab: while one tab sends an intent, Create in a second
// tab of the same browser starts none.
func TestBrowserSecondTab(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	second := &page{t: t, db: p.db, rec: p.rec, base: p.base, tab: p.tab.Sibling(t)}
	second.ctx = second.tab.Ctx
	second.do(chromedp.Navigate(p.base + "/"))
	second.wait(`!document.querySelector('#create').hidden || !document.querySelector('#sign-in').hidden`, 5*time.Second)
	if second.eval(`String(document.querySelector('#sign-in').hidden)`) == "false" {
		second.do(chromedp.SendKeys(chromedp.CSS("#token"), testenv.TokenAlice), chromedp.Click(chromedp.CSS("#sign-in-form button")))
	}
	p.fill("two tabs", "the first tab is held 2 s")
	second.fill("two tabs", "the first tab is held 2 s")
	p.do(set("#switch-delay", "3s"), chromedp.Click(chromedp.CSS("#create-button")))
	if !testenv.Eventually(5*time.Second, func() bool { keys, _ := p.creates(); return len(keys) == 1 }) {
		t.Fatal("the first tab's attempt never reached the server")
	}
	second.do(chromedp.Click(chromedp.CSS("#create-button")))
	second.wait(`document.querySelector('#notice').textContent.includes('Another tab')`, 5*time.Second)
	p.waitState("created", 10*time.Second)
	p.oneKey()
	if p.rows() != 1 {
		t.Fatalf("%d requests from two tabs, want 1", p.rows())
	}
}

// TestBrowserTheBudgetsTailIsNoBurst: against a server that is down (every
// connection closed unanswered), the page's attempts stay spread to the
// end of its 5 s budget, by the Go client's rule: each wait at least the
// backoff's floor (half its interval), none with less than 250 ms of the
// budget left, at most two in its last second. Counted at the server.
func TestBrowserTheBudgetsTailIsNoBurst(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	p.rec.setCut(true)
	p.fill("down", "the server is down")
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("outcome-unknown", 8*time.Second)
	p.oneKey()
	// An attempt the browser sent again on its own arrives twice: each
	// attempt is counted at its first arrival.
	p.rec.mu.Lock()
	var arrived []time.Time
	for _, post := range p.rec.posts {
		if n, _ := strconv.Atoi(post.attempt); n == len(arrived)+1 {
			arrived = append(arrived, post.at)
		}
	}
	p.rec.mu.Unlock()
	// The page's deadline is a little earlier than 5 s after the first attempt.
	testenv.CheckRetrySchedule(t, arrived, arrived[0], arrived[0].Add(5*time.Second))
}

// TestBrowserEditUndoneAfterOutcomeUnknown: a character typed and deleted
// after "outcome unknown" leaves the same bytes, so Create goes on with the
// same intent and key: one request, although the first attempt's work
// outlives the budget.
func TestBrowserEditUndoneAfterOutcomeUnknown(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	old := p.unknown("undone")
	p.do(chromedp.SendKeys(chromedp.CSS("#note"), "x"), chromedp.SendKeys(chromedp.CSS("#note"), kb.Backspace),
		set("#switch-delay", ""), chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	if key := p.oneKey(); key != old || p.rows() != 1 {
		t.Fatalf("the undone edit was sent with key %s and made %d requests; want key %s and one request", key, p.rows(), old)
	}
	p.created()
}

// TestBrowserChangedFieldsAfterOutcomeUnknown: Create with changed fields
// after "outcome unknown" is a new intent with a new key, but only once
// the page asked the outcome route what became of the unfinished one and
// said so.
func TestBrowserChangedFieldsAfterOutcomeUnknown(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	old := p.unknown("changed")
	p.do(set("#switch-delay", ""), chromedp.SendKeys(chromedp.CSS("#note"), " and changed"))
	if notice := p.eval(`document.querySelector('#notice').textContent`); strings.Contains(notice, "dropped") {
		t.Fatalf("typing dropped the unfinished intent: %q", notice)
	}
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	keys, _ := p.creates()
	last := keys[len(keys)-1]
	if last == old || slices.Index(keys, last) != len(keys)-1 {
		t.Fatalf("the changed fields were sent with keys %v; want a new key after %s", keys, old)
	}
	// The outcome route was asked about the old key before the new key's
	// first attempt.
	p.rec.mu.Lock()
	calls := slices.Clone(p.rec.calls)
	p.rec.mu.Unlock()
	asked := slices.IndexFunc(calls, func(c string) bool {
		return strings.HasPrefix(c, "GET /v1/idempotency-keys/"+old+"?operation=demo-requests.create")
	})
	sent := slices.IndexFunc(calls, func(c string) bool { return strings.HasSuffix(c, " "+last) })
	if asked < 0 || asked > sent {
		t.Fatalf("the page did not ask about key %s before it sent key %s:\n%s", old, last, strings.Join(calls, "\n"))
	}
	// The first attempt (held 8 s) was still running then.
	if earlier := p.eval(`document.querySelector('#earlier').hidden ? '' : document.querySelector('#earlier').textContent`); !strings.Contains(earlier, old) || !strings.Contains(earlier, "still running") {
		t.Fatalf("the page says %q of the unfinished intent %s", earlier, old)
	}
}

// TestBrowserSignOutEndsTheIntent: alice's intent whose outcome is unknown
// does not outlive her Sign out: it offers Check status first, then forgets
// the intent, and bob, signed in next in the same tab, sees nothing of it
// and sends nothing of hers.
func TestBrowserSignOutEndsTheIntent(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	const bobToken = "tok-e2e-bob-71a3"
	p := openPage(t, "/", "API_TOKENS=alice:"+auth.Hash(testenv.TokenAlice)+",bob:"+auth.Hash(bobToken))
	alices := p.unknown("alice's topic")
	leaving := `(document.querySelector('#leaving') || {hidden: true}).hidden === false`
	p.do(chromedp.Click(chromedp.CSS("#sign-out")))
	p.wait(leaving+` || !document.querySelector('#sign-in').hidden`, 5*time.Second)
	offered := p.eval(`String(`+leaving+`)`) == "true"
	if offered {
		if text := p.eval(`document.querySelector('#leaving-text').textContent`); !strings.Contains(text, alices) {
			t.Fatalf("Sign out says %q, not that the intent %s is unfinished", text, alices)
		}
		// Check status, offered there, asks about alice's key as alice.
		p.do(chromedp.Click(chromedp.CSS("#leaving-check")))
		p.wait(`!document.querySelector('#outcome').hidden && !document.querySelector('#check-status').disabled`, 5*time.Second)
		p.do(chromedp.Click(chromedp.CSS("#sign-out")))
		p.wait(leaving+` || !document.querySelector('#sign-in').hidden`, 5*time.Second)
		if p.eval(`String(`+leaving+`)`) == "true" {
			p.do(chromedp.Click(chromedp.CSS("#leaving-confirm")))
		}
	}
	p.do(chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SendKeys(chromedp.CSS("#token"), bobToken),
		chromedp.Click(chromedp.CSS("#sign-in-form button")), chromedp.WaitVisible(chromedp.CSS("#topic")))
	shown := p.eval(`[document.querySelector('#topic').value, document.querySelector('#note').value,
		document.querySelector('#outcome').hidden ? '' : document.querySelector('#outcome').textContent,
		document.querySelector('#notice').textContent, document.querySelector('#attempts tbody').textContent,
		sessionStorage.getItem('demo-api.intent') || ''].join('|')`)
	if strings.Trim(shown, "|") != "" {
		t.Fatalf("bob's page shows alice's: %q", shown)
	}
	p.fill("bob's topic", "")
	p.do(set("#switch-delay", ""), chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	p.rec.mu.Lock()
	defer p.rec.mu.Unlock()
	for _, post := range p.rec.posts {
		if (post.key == alices) != (post.auth == "Bearer "+testenv.TokenAlice) {
			t.Errorf("a create with key %s went under %q", post.key, post.auth)
		}
	}
	if !offered {
		t.Error("Sign out with an unfinished intent did not offer Check status")
	}
}

func TestBrowserRefusal(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	p.fill("blocked", "a topic the rules refuse")
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("refused", 10*time.Second)
	if code, title := p.detail("code"), p.detail("title"); code != "topic_refused" || title == "" || p.detail("detail") == "" {
		t.Fatalf("the refusal shows code %q, title %q", code, title)
	}
	if keys, _ := p.creates(); len(keys) != 1 {
		t.Fatalf("%d creates for a refusal, want 1", len(keys))
	}
	p.tab.Screenshot(t, "refused")
}

func TestBrowserShowsMarkupAsText(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/")
	markup := `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`
	p.fill("markup", markup)
	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	if got := p.detail("note"); got != markup {
		t.Fatalf("the note shows as %q, want the text %q", got, markup)
	}
	if v := p.eval(`String(window.pwned) + document.querySelectorAll('main img, main script').length`); v != "undefined0" {
		t.Fatalf("the note's markup ran or was parsed: %s", v)
	}
}

// TestBrowserCSP: the pages' policy refuses an inline script, and the
// browser tests see the refusal, so a page that broke the policy would fail
// them.
func TestBrowserCSP(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	server, _ := testenv.ServeInProcess(t, run)
	tab := browsertest.NewTab(t)
	msgs := chromedp.Console(tab.Ctx)
	err := chromedp.Do(tab.Ctx, chromedp.Navigate(server+"/workshop"), chromedp.Evaluate[chromedp.Void](
		`const s = document.createElement('script'); s.textContent = 'window.inline = 1'; document.body.append(s)`))
	if err != nil {
		t.Fatal(err)
	}
	for m, err := range msgs {
		if err != nil {
			t.Fatal(err)
		}
		if browsertest.Fault(m) && strings.Contains(m.Text, "Content Security Policy") {
			break
		}
	}
	if v, _ := chromedp.Run(tab.Ctx, chromedp.Evaluate[string](`String(window.inline)`)); v != "undefined" {
		t.Fatalf("an inline script ran: window.inline = %s", v)
	}
	tab.Forgive("Content Security Policy")
}

func TestBrowserWorkshopPage(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	p := openPage(t, "/workshop", "IDEMPOTENCY_TTL=4s", "IDEMPOTENCY_LEASE=4s",
		"PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=3", "DISPATCH_FIRST_RETRY=200ms")
	p.do(chromedp.SendKeys(chromedp.CSS("#token"), testenv.TokenAlice), chromedp.WaitVisible(chromedp.CSS("#step-expiry")))
	if needs := p.needs(); needs != "" {
		t.Fatalf("this server meets every step's needs, yet the page shows:\n%s", needs)
	}
	p.do(chromedp.Click(chromedp.CSS("#run-all")))
	p.wait(`/passed/.test(document.querySelector('#summary').textContent)`, 2*time.Minute)
	verdicts := p.eval(`[...document.querySelectorAll('.step')].map(s => s.id + ' ' + s.querySelector('.verdict').textContent).join('\n')`)
	if n := strings.Count(verdicts, " PASS "); n != len(web.Steps()) {
		t.Fatalf("%d of %d steps passed:\n%s", n, len(web.Steps()), verdicts)
	}
	p.tab.Screenshot(t, "workshop")
}

// needs lists the requirements the workshop page shows, a line per step.
func (p *page) needs() string {
	return p.eval(`[...document.querySelectorAll('.step')].filter(s => s.querySelector('.needs').checkVisibility())
		.map(s => s.id + ': ' + s.querySelector('.needs').textContent).join('\n')`)
}

// TestBrowserWorkshopShowsUnmetNeeds: on a server without the workshop
// knobs, a short TTL or a review desk, the workshop page names what each
// step lacks, and shows no requirement for a step that has what it needs.
func TestBrowserWorkshopShowsUnmetNeeds(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/workshop", "WORKSHOP=false")
	p.do(chromedp.WaitVisible(chromedp.CSS("#step-expiry")))
	want := strings.Join([]string{
		"step-in-progress: needs WORKSHOP=true",
		"step-lost-response: needs WORKSHOP=true",
		"step-transient: needs WORKSHOP=true",
		"step-external: needs the review desk's fault knobs",
		"step-resume: needs WORKSHOP=true and a review desk (PROVIDER_URL)",
		"step-expiry: needs WORKSHOP=true, or a TTL of at most 2m",
	}, "\n")
	if got := p.needs(); got != want {
		t.Fatalf("the page shows the needs:\n%s\nwant:\n%s", got, want)
	}
}

// TestBrowserRetriesARateLimit: over the bound on new keys (one key at
// once, one more every 2 s), the page's first attempt is refused 429
// rate_limited with Retry-After; the page waits that long, within its
// budget, sends the same key again, and ends at created with one request.
func TestBrowserRetriesARateLimit(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/", "NEW_KEYS_PER_SECOND=0.5", "NEW_KEYS_BURST=1")
	p.fill("limited", "the page's first attempt meets the bound")
	// One create through HTTP spends alice's only token.
	req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/demo-requests", strings.NewReader(`{"topic":"spent","note":"the bucket's one token"}`))
	req.Header.Set("Authorization", "Bearer "+testenv.TokenAlice)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "spend-the-bucket")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the create that spends the bucket: %d, want 201", resp.StatusCode)
	}
	p.rec.mu.Lock()
	p.rec.posts = nil
	p.rec.mu.Unlock()

	p.do(chromedp.Click(chromedp.CSS("#create-button")))
	p.waitState("created", 10*time.Second)
	key := p.oneKey()
	seen := p.eval(`[...document.querySelectorAll('#attempts tbody tr')].map(r => r.children[1].textContent).join(', ')`)
	if seen != "429 rate_limited, 201" {
		t.Fatalf("the page's attempts saw %q, want a 429 rate_limited, then a 201", seen)
	}
	// The server saw the key twice: refused (nothing stored), then created.
	p.rec.mu.Lock()
	posts := slices.Clone(p.rec.posts)
	p.rec.mu.Unlock()
	if len(posts) != 2 {
		t.Fatalf("%d creates of key %s reached the server, want 2", len(posts), key)
	}
	if gap := posts[1].at.Sub(posts[0].at); gap < time.Second {
		t.Errorf("the page sent again %s after the 429, before its Retry-After", gap)
	}
	limited := 0
	for line := range strings.Lines(testenv.Get(t, p.base+"/metrics")) {
		if strings.HasPrefix(line, "demo_api_idempotency_outcomes_total{") && strings.Contains(line, `outcome="rate_limited"`) {
			n, _ := strconv.Atoi(strings.TrimSpace(line[strings.LastIndex(line, " "):]))
			limited += n
		}
	}
	if limited != 1 {
		t.Errorf("/metrics counts %d creates refused rate_limited, want 1", limited)
	}
	var status int
	if err := p.db.Get(&status, `SELECT status_code FROM idempotency_keys WHERE idem_key = $1`, key); err != nil || status != http.StatusCreated {
		t.Fatalf("the page's key stores %d (%v), want 201", status, err)
	}
	if n := testenv.Count(t, p.db, `SELECT count(*) FROM demo_requests WHERE topic = 'limited'`); n != 1 {
		t.Fatalf("%d requests of the page's intent, want 1", n)
	}
	var id string
	if err := p.db.Get(&id, `SELECT id FROM demo_requests WHERE topic = 'limited'`); err != nil || p.detail("requestId") != id {
		t.Fatalf("the page shows request %q, the database holds %q (%v)", p.detail("requestId"), id, err)
	}
}

// TestBrowserWorkshopChecksTheName: in a workshop room the workshop page
// checks the name before it sends anything: an uppercase name shows the
// server's rule of names and runs no step (no request reaches the server,
// so no row of 401s); a name lab machines share is warned of; a good name
// clears both and the steps run.
func TestBrowserWorkshopChecksTheName(t *testing.T) {
	testenv.Long(t, "drives a browser")
	t.Parallel()
	p := openPage(t, "/workshop", "WORKSHOP_ROOM=true")
	p.do(chromedp.WaitVisible(chromedp.CSS("#step-expiry")), chromedp.SendKeys(chromedp.CSS("#token"), "Ana"))
	p.do(chromedp.Click(chromedp.CSS("#run-all")))
	p.wait(`document.querySelector('#name-problem').checkVisibility()`, 5*time.Second)
	if shown := p.eval(`document.querySelector('#name-problem').textContent`); !strings.Contains(shown, room.NameRule) {
		t.Fatalf("for the name Ana the page shows %q, want the server's rule %q", shown, room.NameRule)
	}
	time.Sleep(500 * time.Millisecond) // what a run would have sent by now
	p.rec.mu.Lock()
	sent := len(p.rec.posts)
	p.rec.mu.Unlock()
	if verdicts := p.eval(`[...document.querySelectorAll('.step .verdict')].map(v => v.textContent).join('')`); sent != 0 || verdicts != "" {
		t.Fatalf("with a bad name the page sent %d requests and shows verdicts %q; want none", sent, verdicts)
	}

	p.do(set("#token", ""), chromedp.SendKeys(chromedp.CSS("#token"), "student"))
	p.wait(`/share/.test(document.querySelector('#name-problem').textContent)`, 5*time.Second)

	p.do(set("#token", ""), chromedp.SendKeys(chromedp.CSS("#token"), "ana-7"))
	p.wait(`!document.querySelector('#name-problem').checkVisibility()`, 5*time.Second)
	p.do(chromedp.Click(chromedp.CSS("#step-replay button")))
	p.wait(`/PASS|FAIL|SKIP/.test(document.querySelector('#step-replay .verdict').textContent)`, time.Minute)
	if v := p.eval(`document.querySelector('#step-replay .verdict').textContent`); !strings.HasPrefix(v, "PASS") {
		t.Fatalf("the replay step with the name ana-7: %s", v)
	}
}
