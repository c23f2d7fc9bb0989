package service

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDispatcherKilledBetweenAcceptAndMark SIGKILLs the dispatcher (serve)
// after the review desk (a double of its HTTP API, so that the test stays
// in a copy without the stand-in desk) accepted a submission and before the dispatcher
// recorded it. After a restart, the next attempt asks the desk first and
// finds it: the desk holds one submission, the request shows submitted, and
// the restarted dispatcher sent nothing.
func TestDispatcherKilledBetweenAcceptAndMark(t *testing.T) {
	testenv.Long(t, "kills the dispatcher process")
	url := pgtest.NewURL(t)
	desk := testenv.StartDeskDouble(t)
	desk.Faults(t, testenv.DeskFaults{HoldAnswer: "1m"}) // accept, then hold the answer
	// A call may take 1 s, so a taken row's lease is 3 s.
	env := []string{"PROVIDER_URL=" + desk.URL, "DISPATCH_CALL_TIMEOUT=1s"}
	p := testenv.Start(t, url, env...)
	resp, body, err := p.Post("key-outbox")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %s", err, body)
	}
	if !testenv.Eventually(5*time.Second, func() bool { return desk.Submissions(t) == 1 }) {
		t.Fatal("the desk never got the submission")
	}
	p.Kill(t) // within the held answer: nothing recorded yet
	db := sqlx.MustOpen("postgres", url)
	defer db.Close()
	if n := testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE state = 'pending' AND attempts = 1`); n != 1 {
		t.Fatalf("%d outbox rows pending after one attempt, want 1: the kill came after the mark", n)
	}

	desk.Faults(t, testenv.DeskFaults{})
	p2 := testenv.Start(t, url, env...)
	if !testenv.Eventually(10*time.Second, func() bool {
		return testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE state = 'submitted' AND attempts = 2`) == 1
	}) {
		t.Fatalf("the delivery was not found submitted by a second attempt:\n%s", p2.Log())
	}
	if n := desk.Submissions(t); n != 1 {
		t.Fatalf("the desk holds %d submissions, want 1", n)
	}
	metrics := testenv.Get(t, p2.URL+"/metrics")
	for _, want := range []string{`demo_api_outbox_status_lookups_total{answer="accepted"} 1`, `demo_api_outbox_provider_calls_total{call="submit_status"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the restarted dispatcher's metrics lack %q", want)
		}
	}
	if !strings.Contains(metrics, `demo_api_outbox_provider_calls_total{call="submit"} 0`+"\n") {
		t.Error("the restarted dispatcher sent the submission again")
	}
}

// TestDispatchCommand: with DISPATCH=false serve hands nothing over; demo-api
// dispatch, a process of its own on the same database, does.
func TestDispatchCommand(t *testing.T) {
	url := pgtest.NewURL(t)
	desk := testenv.StartDeskDouble(t)
	p := testenv.Start(t, url, "PROVIDER_URL="+desk.URL, "DISPATCH=false")
	if resp, body, err := p.Post("key-dispatch"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %s", err, body)
	}
	db := sqlx.MustOpen("postgres", url)
	defer db.Close()
	time.Sleep(500 * time.Millisecond) // more than a dispatcher's idle pause
	if n := desk.Submissions(t); n != 0 {
		t.Fatalf("serve with DISPATCH=false handed over %d requests", n)
	}
	testenv.StartDispatch(t, url, "PROVIDER_URL="+desk.URL)
	if !testenv.Eventually(10*time.Second, func() bool {
		return testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE state = 'submitted'`) == 1
	}) {
		t.Fatal("demo-api dispatch did not hand the request over")
	}
	if n := desk.Submissions(t); n != 1 {
		t.Fatalf("the desk holds %d submissions, want 1", n)
	}
}
