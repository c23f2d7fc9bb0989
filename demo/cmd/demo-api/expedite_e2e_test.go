package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// The expedite across processes (docs/steps.md, the crash matrix): a real
// serve is SIGKILLed inside a call to the review desk, and a retry, or the
// completer of another serve or of demo-api dispatch, finishes the run.

// expediteLease is the IDEMPOTENCY_LEASE of these tests: a dead runner's
// key is free 5 s after its last save, and a step's budget (half the lease)
// is 2.5 s, what one statement may take by the contract (its 2 s bound and
// the wire's half second): a shorter budget fails a step, the create too,
// on a busy machine whose database answers within its bound.
const expediteLease = 5 * time.Second

// expediteKey is the Idempotency-Key of the expedite in these tests.
const expediteKey = "key-exp"

// expediteRig is a database, a review desk, and an accepted demo request
// of alice's to expedite (once a serve made it).
type expediteRig struct {
	t    *testing.T
	url  string
	db   *sqlx.DB
	desk *desktest.Desk
	id   string
}

func newExpediteRig(t *testing.T) *expediteRig {
	t.Helper()
	x := &expediteRig{t: t, url: pgtest.NewURL(t), desk: desktest.StartDesk(t, nil)}
	x.db = sqlx.MustOpen("postgres", x.url)
	t.Cleanup(func() { x.db.Close() })
	return x
}

// env is the environment of a serve or a dispatch of the rig whose
// completer looks for abandoned runs every complete.
func (x *expediteRig) env(complete time.Duration) []string {
	return []string{"PROVIDER_URL=" + x.desk.URL, "IDEMPOTENCY_LEASE=" + expediteLease.String(),
		"COMPLETE_INTERVAL=" + complete.String()}
}

// create makes the demo request to expedite, through p.
func (x *expediteRig) create(p *testenv.Proc) {
	x.t.Helper()
	resp, body, err := p.Post("key-exp-create")
	var r demo.Request
	if err != nil || resp.StatusCode != http.StatusCreated || json.Unmarshal([]byte(body), &r) != nil || r.ID == "" {
		x.t.Fatalf("create the request to expedite: %v %s", err, body)
	}
	x.id = r.ID
}

// expedite sends the expedite of the rig's request to p under key, as the
// client's attempt (no X-Client-Attempt if 0).
func (x *expediteRig) expedite(p *testenv.Proc, key string, attempt int) (*http.Response, []byte, error) {
	var h []string
	if attempt > 0 {
		h = []string{"X-Client-Attempt", strconv.Itoa(attempt)}
	}
	return p.Do(http.MethodPost, "/v1/demo-requests/"+x.id+"/expedite", key, h...)
}

// settle retries key on p from attempt on until an answer other than 409
// (the key held by a runner, dead or alive), and returns it with the
// number of 409s before it.
func (x *expediteRig) settle(p *testenv.Proc, key string, attempt int) (*http.Response, []byte, int) {
	x.t.Helper()
	for conflicts, deadline := 0, time.Now().Add(6*expediteLease); time.Now().Before(deadline); attempt++ {
		resp, body, err := x.expedite(p, key, attempt)
		if err != nil {
			x.t.Fatalf("expedite, attempt %d: %v", attempt, err)
		}
		if resp.StatusCode != http.StatusConflict {
			return resp, body, conflicts
		}
		conflicts++
		time.Sleep(100 * time.Millisecond)
	}
	x.t.Fatalf("expedite %s was still in progress after %s", key, 6*expediteLease)
	return nil, nil, 0
}

// runAt is a run as the runs table holds it.
type runAt struct {
	Point     string         `db:"point"`
	State     string         `db:"state"`
	Attempts  int            `db:"attempts"`
	LastError sql.NullString `db:"last_error"`
}

// run reads the run of key, ok false when there is none yet.
func (x *expediteRig) run(key string) (r runAt, ok bool) {
	x.t.Helper()
	err := x.db.Get(&r, `SELECT point, state, attempts, last_error FROM runs WHERE operation = $1 AND idem_key = $2`,
		expedite.ExpediteOperation, key)
	if err == sql.ErrNoRows {
		return r, false
	}
	if err != nil {
		x.t.Fatal(err)
	}
	return r, true
}

// leaseLeft is how long the lease of key has to run, by the database's
// clock.
func (x *expediteRig) leaseLeft(key string) time.Duration {
	x.t.Helper()
	var us int64
	if err := x.db.Get(&us, `SELECT (extract(epoch FROM lease_until - now()) * 1e6)::bigint FROM idempotency_keys
		WHERE operation = $1 AND idem_key = $2`, expedite.ExpediteOperation, key); err != nil {
		x.t.Fatal(err)
	}
	return time.Duration(us) * time.Microsecond
}

// holds counts the slots and the charges the desk holds for the request.
func (x *expediteRig) holds() (slots, charges int) {
	x.t.Helper()
	return testenv.Count(x.t, x.desk.DB, `SELECT count(*) FROM slots WHERE request_id = $1`, x.id),
		testenv.Count(x.t, x.desk.DB, `SELECT count(*) FROM charges WHERE request_id = $1`, x.id)
}

// killPoint is where in the expedite a serve dies: inside its call to the
// desk's resource (slots or charges), which the desk's faults make last,
// with the run at point and the desk holding slots and charges for the
// request.
type killPoint struct {
	name           string
	faults         provider.Faults
	resource       string
	point          string
	slots, charges int
	// calls are the desk's calls once the run is finished: the dead
	// runner's, then its resumer's question and what it sent.
	calls map[string]int
}

// killPoints are the crash matrix's rows where the runner dies inside a
// call to the desk.
var killPoints = []killPoint{
	{
		name:   "after ordered, the slot call in flight",
		faults: provider.Faults{Delay: "30s", Only: []string{"slots"}}, resource: "slots", point: "ordered",
		// The resumer asks (404) and reserves.
		calls: map[string]int{"POST /v1/slots": 2, "GET /v1/slots/{key}": 1, "POST /v1/charges": 1, "GET /v1/charges/{key}": 0},
	},
	{
		name:   "inside the slot call, the desk holding the slot",
		faults: provider.Faults{HoldAnswer: "30s", Only: []string{"slots"}}, resource: "slots", point: "ordered", slots: 1,
		// The resumer asks, finds the slot, and sends no second one.
		calls: map[string]int{"POST /v1/slots": 1, "GET /v1/slots/{key}": 1, "POST /v1/charges": 1, "GET /v1/charges/{key}": 0},
	},
	{
		name:   "after slot_reserved, the charge in flight",
		faults: provider.Faults{Delay: "30s", Only: []string{"charges"}}, resource: "charges", point: "slot_reserved", slots: 1,
		calls: map[string]int{"POST /v1/slots": 1, "GET /v1/slots/{key}": 0, "POST /v1/charges": 2, "GET /v1/charges/{key}": 1},
	},
	{
		name:   "inside the charge, the desk holding the charge",
		faults: provider.Faults{HoldAnswer: "30s", Only: []string{"charges"}}, resource: "charges", point: "slot_reserved", slots: 1, charges: 1,
		calls: map[string]int{"POST /v1/slots": 1, "GET /v1/slots/{key}": 0, "POST /v1/charges": 1, "GET /v1/charges/{key}": 1},
	},
}

// killInside expedites under key through p with kp's faults on the desk,
// SIGKILLs p while it is inside kp's call, and clears the faults. It fails
// unless p died there: the run at kp's point after one turn, its call
// neither answered nor timed out (a call past its budget would have parked
// the run with a last error), the desk holding what kp says.
func (x *expediteRig) killInside(p *testenv.Proc, kp killPoint, key string) {
	t := x.t
	t.Helper()
	if x.id == "" {
		x.create(p)
	}
	x.desk.Faults(t, kp.faults)
	// p is stopped (SIGSTOP) the moment its call reaches the desk, so that
	// its step's budget (half the lease) cannot run out while the test
	// waits for the desk to hold what kp says; then it is killed.
	var stop sync.Once
	x.desk.OnArrival("POST /v1/"+kp.resource, func() {
		stop.Do(func() { stopProcess(p.Cmd.Process) })
	})
	answered := make(chan string, 1)
	go func() {
		resp, body, err := x.expedite(p, key, 1)
		if err != nil {
			answered <- ""
			return
		}
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	if !testenv.Eventually(10*time.Second, func() bool {
		r, ok := x.run(key)
		slots, charges := x.holds()
		return ok && r.Point == kp.point && x.desk.Calls("POST /v1/"+kp.resource) == 1 && slots == kp.slots && charges == kp.charges
	}) {
		r, _ := x.run(key)
		t.Fatalf("the run never reached its call to %s at %s: run %+v, desk calls %v", kp.resource, kp.point, r, x.desk.AllCalls())
	}
	p.Kill(t)
	x.desk.OnArrival("POST /v1/"+kp.resource, nil)
	if a := <-answered; a != "" {
		t.Fatalf("the client of the killed serve got an answer: %s", a)
	}
	if r, _ := x.run(key); r.Point != kp.point || r.State != "running" || r.Attempts != 1 || r.LastError.Valid {
		t.Fatalf("after the kill the run is %+v; want it running at %s after one turn, with no last error", r, kp.point)
	}
	if slots, charges := x.holds(); slots != kp.slots || charges != kp.charges {
		t.Fatalf("after the kill the desk holds %d slots and %d charges, want %d and %d", slots, charges, kp.slots, kp.charges)
	}
	x.desk.Faults(t, provider.Faults{})
}

// resumer is who finishes a run whose serve died.
type resumer string

const (
	byRetry    resumer = "retry"
	byServe    resumer = "completer of a restarted serve"
	byDispatch resumer = "completer of demo-api dispatch"
)

// resume starts the processes of who, lets who finish the run of key, and
// returns the 201 it stored. Each case leaves who the only runner that can
// take the run over.
func (x *expediteRig) resume(key string, who resumer) []byte {
	t := x.t
	t.Helper()
	if who == byRetry {
		// The restarted serve's completer never looks: the run is the
		// retry's to take over.
		p := testenv.Start(t, x.url, x.env(time.Hour)...)
		left := x.leaseLeft(key)
		resp, body, conflicts := x.settle(p, key, 2)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the retry: %d %s, want a fresh 201: the retry finished the run", resp.StatusCode, body)
		}
		if left > 500*time.Millisecond && conflicts == 0 {
			t.Fatalf("a retry %s before the dead runner's lease ended took the key over", left)
		}
		x.checkReplay(p, key, body)
		return body
	}
	// No retry is sent until the outcome route shows the answer: only the
	// completer can finish the run.
	var p, c *testenv.Proc
	if who == byServe {
		p = testenv.Start(t, x.url, x.env(100*time.Millisecond)...)
		c = p
	} else {
		p = testenv.Start(t, x.url, x.env(time.Hour)...)
		c = testenv.StartDispatch(t, x.url, x.env(100*time.Millisecond)...)
	}
	var o expediteOutcome
	if !testenv.Eventually(6*expediteLease, func() bool {
		o = x.outcome(p, key)
		return o.State == "completed"
	}) {
		t.Fatalf("the %s did not finish the run: %+v", who, o)
	}
	if o.Status != http.StatusCreated || o.Run == nil || o.Run.State != "done" || o.Run.RecoveryPoint != "charged" {
		t.Fatalf("the outcome route: %+v, want completed with 201, the run done at charged", o)
	}
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(c.Log(), `"msg":"continued abandoned runs"`) }) {
		t.Fatalf("the %s did not log that it continued the run", who)
	}
	if p != c && strings.Contains(p.Log(), `"msg":"continued abandoned runs"`) {
		t.Fatal("serve's completer continued the run, though it never looks")
	}
	var body []byte
	if err := x.db.Get(&body, `SELECT response_body FROM idempotency_keys WHERE operation = $1 AND idem_key = $2`,
		expedite.ExpediteOperation, key); err != nil {
		t.Fatal(err)
	}
	x.checkReplay(p, key, body)
	return body
}

// expediteOutcome is the outcome route's view of an expedite's key.
type expediteOutcome struct {
	State  string
	Status int
	Run    *struct {
		RecoveryPoint, State string
		Attempts             int
	}
}

func (x *expediteRig) outcome(p *testenv.Proc, key string) expediteOutcome {
	x.t.Helper()
	resp, body, err := p.Do(http.MethodGet, "/v1/idempotency-keys/"+key+"?operation="+expedite.ExpediteOperation, "")
	var o expediteOutcome
	if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(body, &o) != nil {
		x.t.Fatalf("the outcome of %s: %v %s", key, err, body)
	}
	return o
}

// checkReplay fails unless a retry of key replays want byte for byte.
func (x *expediteRig) checkReplay(p *testenv.Proc, key string, want []byte) {
	x.t.Helper()
	resp, body, err := x.expedite(p, key, 9)
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(body, want) {
		x.t.Fatalf("a retry after the answer: %v %v %s, want the replay of %s", err, resp, body, want)
	}
}

// checkExpedited fails unless the request was expedited once, as body (the
// 201 under key) says: the desk holds one slot, charged, and one charge
// for it, and was called as calls says; alice's credit went down once; the
// order is confirmed with the desk's references; the key holds body; the
// run is done after turns turns: the dead runner's and its resumers'.
func (x *expediteRig) checkExpedited(key string, body []byte, turns int, calls map[string]int) {
	t := x.t
	t.Helper()
	var e expedite.Expedite
	if err := json.Unmarshal(body, &e); err != nil || e.RequestID != x.id || e.State != expedite.ExpediteConfirmed || e.Amount != expedite.ExpediteAmount {
		t.Fatalf("the answer %s is not the confirmed expedite of %s", body, x.id)
	}
	if n := testenv.Count(t, x.desk.DB, `SELECT count(*) FROM slots WHERE request_id = $1`, x.id); n != 1 {
		t.Errorf("the desk holds %d slots for the request, want 1", n)
	}
	if n := testenv.Count(t, x.desk.DB, `SELECT count(*) FROM slots WHERE request_id = $1 AND state = 'charged' AND reference = $2`,
		x.id, e.SlotReference); n != 1 {
		t.Errorf("the desk holds no charged slot %q for the request", e.SlotReference)
	}
	if n := testenv.Count(t, x.desk.DB, `SELECT count(*) FROM charges WHERE request_id = $1`, x.id); n != 1 {
		t.Errorf("the desk holds %d charges for the request, want 1", n)
	}
	if n := testenv.Count(t, x.desk.DB, `SELECT count(*) FROM charges WHERE request_id = $1 AND reference = $2 AND amount = $3`,
		x.id, e.ChargeReference, expedite.ExpediteAmount); n != 1 {
		t.Errorf("the desk holds no charge %q of %d for the request", e.ChargeReference, expedite.ExpediteAmount)
	}
	if n := testenv.Count(t, x.desk.DB, `SELECT count(*) FROM releases`) + testenv.Count(t, x.desk.DB, `SELECT count(*) FROM refunds`); n != 0 {
		t.Errorf("the desk holds %d releases and refunds, want none", n)
	}
	want := provider.DefaultOptions().Credit - expedite.ExpediteAmount
	if n := testenv.Count(t, x.desk.DB, `SELECT credit FROM accounts WHERE account = 'alice'`); n != want {
		t.Errorf("alice's credit is %d, want %d: debited once", n, want)
	}
	for call, n := range calls {
		if got := x.desk.Calls(call); got != n {
			t.Errorf("desk calls %s: %d, want %d (all: %v)", call, got, n, x.desk.AllCalls())
		}
	}
	if n := testenv.Count(t, x.db, `SELECT count(*) FROM expedites WHERE request_id = $1 AND state = 'confirmed'
		AND slot_reference = $2 AND charge_reference = $3`, x.id, e.SlotReference, e.ChargeReference); n != 1 {
		t.Errorf("the order is not confirmed with the desk's references")
	}
	if n := testenv.Count(t, x.db, `SELECT count(*) FROM expedites`); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if n := testenv.Count(t, x.db, `SELECT count(*) FROM idempotency_keys WHERE operation = $1 AND idem_key = $2
		AND state = 'completed' AND status_code = 201 AND response_body = $3`, expedite.ExpediteOperation, key, body); n != 1 {
		t.Errorf("the key does not hold the answer")
	}
	if r, _ := x.run(key); r.State != "done" || r.Point != "charged" || r.Attempts != turns {
		t.Errorf("the run is %+v, want done at charged after %d turns", r, turns)
	}
}

// TestExpediteKilledInsideEachStep SIGKILLs a real serve inside each call
// of the expedite to the desk (docs/steps.md, the crash matrix), and lets a
// retry finish the run, and the completer of a restarted serve or of
// demo-api dispatch. Each time the desk holds one slot and one charge, the
// credit went down once, the order is confirmed, and the resumer asked the
// desk before it sent the step it was killed in.
func TestExpediteKilledInsideEachStep(t *testing.T) {
	testenv.Long(t, "kills the server process inside each step")
	t.Parallel()
	for i, kp := range killPoints {
		for _, who := range []resumer{byRetry, []resumer{byServe, byDispatch}[i%2]} {
			t.Run(kp.name+", then the "+string(who), func(t *testing.T) {
				t.Parallel()
				x := newExpediteRig(t)
				// The dead serve's completer never looks: only its request
				// runs the expedite until the kill.
				x.killInside(testenv.Start(t, x.url, x.env(time.Hour)...), kp, expediteKey)
				body := x.resume(expediteKey, who)
				x.checkExpedited(expediteKey, body, 2, kp.calls)
			})
		}
	}
}

// TestExpediteRacingResumers: a run abandoned inside its slot call (its
// serve killed while the desk holds the slot) is fought over, the moment
// its lease ends, by 20 retries on two replicas and both replicas'
// completers. One takes it over and finishes it: the desk was asked once
// and sent each step once, every answer is 409 or the one 201, byte for
// byte.
func TestExpediteRacingResumers(t *testing.T) {
	testenv.Long(t, "a long end-to-end race of processes")
	t.Parallel()
	x := newExpediteRig(t)
	const complete = 100 * time.Millisecond
	b := testenv.Start(t, x.url, x.env(complete)...)
	holdSlot := killPoints[1] // the desk holds the slot, the run is at ordered
	victim := testenv.Start(t, x.url, x.env(time.Hour)...)
	x.killInside(victim, holdSlot, expediteKey)
	a := testenv.Start(t, x.url, x.env(complete)...)
	replicas := []*testenv.Proc{a, b}

	type answer struct {
		status   int
		replayed bool
		body     string
		err      error
	}
	var mu sync.Mutex
	var answers []answer
	var last [20]answer
	release := make(chan struct{})
	var wg sync.WaitGroup
	for g := range last {
		wg.Go(func() {
			<-release
			for attempt, deadline := 2, time.Now().Add(6*expediteLease); time.Now().Before(deadline); attempt++ {
				resp, body, err := x.expedite(replicas[g%2], expediteKey, attempt)
				a := answer{err: err}
				if err == nil {
					a = answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(body)}
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				last[g] = a
				if a.status != http.StatusConflict {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// Released just before the dead runner's lease ends, while the
	// completers look every 100 ms: the retries' claims and the
	// completers' takes meet at the lease's end.
	time.Sleep(x.leaseLeft(expediteKey) - 50*time.Millisecond)
	close(release)
	wg.Wait()

	var body string
	fresh := 0
	for _, a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("a retry got no answer: %v", a.err)
		case a.status == http.StatusConflict:
		case a.status != http.StatusCreated:
			t.Fatalf("a retry got %d %s, want 201 or 409", a.status, a.body)
		case body == "":
			body = a.body
			fallthrough
		default:
			if a.body != body {
				t.Fatalf("two 201s differ:\n%s\n%s", body, a.body)
			}
			if !a.replayed {
				fresh++
			}
		}
	}
	for g, a := range last {
		if a.status != http.StatusCreated {
			t.Fatalf("retry %d ended with %d %s, want the 201", g, a.status, a.body)
		}
	}
	if fresh > 1 {
		t.Fatalf("%d fresh 201s, want at most one: the run was finished twice", fresh)
	}
	x.checkExpedited(expediteKey, []byte(body), 2, holdSlot.calls)
	// One runner took the key over and resumed the run, retry or
	// completer, in either replica.
	for _, outcome := range []string{"lease_taken_over", "resumed"} {
		n := 0
		for _, p := range replicas {
			n += expediteOutcomes(t, p, outcome)
		}
		if n != 1 {
			t.Errorf("the replicas count %d expedites %s, want 1", n, outcome)
		}
	}
	t.Logf("%d answers; the run was finished by %s", len(answers), map[bool]string{true: "a retry", false: "a completer"}[fresh == 1])
}

// expediteOutcomes reads from p's metrics how many expedites had outcome.
func expediteOutcomes(t *testing.T, p *testenv.Proc, outcome string) int {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(testenv.Get(t, p.URL+"/metrics")))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "demo_api_idempotency_outcomes_total{") &&
			strings.Contains(line, `operation="`+expedite.ExpediteOperation+`"`) && strings.Contains(line, `outcome="`+outcome+`"`) {
			n, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
