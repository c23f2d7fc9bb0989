package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestLostResponse: the finish commits, but the connection drops before the
// client reads the answer. The retry with the same key gets the same request.
func TestLostResponse(t *testing.T) {
	testenv.ForEachPath(t, testLostResponse)
}

func testLostResponse(t *testing.T, path idempotency.Path) {
	e := testenv.New(t, testenv.WithPath(path))
	proxy := hangup(t, e.Srv.Listener.Addr().String())

	r, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/v1/demo-requests", strings.NewReader(body1))
	r.Header.Set("Authorization", "Bearer "+testenv.TokenAlice)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "key-lost")
	if resp, err := http.DefaultClient.Do(r); err == nil {
		resp.Body.Close()
		t.Fatalf("the proxy let a response through: %d", resp.StatusCode)
	}
	// The client saw nothing; the server committed the intent.
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
		t.Fatalf("%d business rows after the lost response, want 1", n)
	}
	var id string
	if err := e.DB.Get(&id, `SELECT id FROM demo_requests`); err != nil {
		t.Fatal(err)
	}
	retry := e.Create("key-lost", body1)
	if retry.Status != http.StatusCreated || retry.Header.Get("Idempotent-Replayed") != "true" || retry.Request(t).ID != id {
		t.Fatalf("retry: %d %v %s, want the replay of %s", retry.Status, retry.Header, retry.Body, id)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
		t.Fatalf("%d business rows after the retry, want 1", n)
	}
}

// hangup is a proxy to upstream that forwards requests and closes the
// client's connection as the response begins, and returns its address.
func hangup(t *testing.T, upstream string) string {
	t.Helper()
	p, err := pgtest.StartProxy(upstream, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.Set(pgtest.LinkHangup)
	return p.Addr()
}

// TestInProgress: while the first request is held inside the work, a retry
// gets 409 with Retry-After and no work runs; once the first finishes, the
// retry gets the replay.
func TestInProgress(t *testing.T) {
	testenv.ForEachPath(t, testInProgress)
}

// testInProgress: a two-phase request holds its claim (Workshop-Delay); a
// retry on path gets 409 with Retry-After and a monitor link, and the
// replay once the first finished.
func testInProgress(t *testing.T, path idempotency.Path) {
	e := testenv.New(t, testenv.WithPath(path), testenv.WithWorkshop())
	claimed, release := e.Hold()
	first := make(chan testenv.Reply, 1)
	go func() {
		r, err := e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-held"}, Body: body1, Header: testenv.HoldHeader})
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	<-claimed

	busy := e.Create("key-held", body1)
	if busy.Status != http.StatusConflict || busy.Problem(t) != apperr.OperationInProgress {
		t.Fatalf("retry while held: %d %s", busy.Status, busy.Body)
	}
	// The owner's work must end within half the lease: Retry-After says
	// when that is, not when the whole lease ends.
	if s, err := strconv.Atoi(busy.Header.Get("Retry-After")); err != nil || s < 1 || s > int(testenv.Lease.Seconds()/2) {
		t.Fatalf("Retry-After %q, want 1..%d seconds", busy.Header.Get("Retry-After"), int(testenv.Lease.Seconds()/2))
	}
	if link := busy.Header.Get("Link"); link != `</v1/idempotency-keys/key-held?operation=demo-requests.create>; rel="monitor"` {
		t.Fatalf("Link %q, want the outcome route as monitor", link)
	}
	outcome := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/key-held", Token: testenv.TokenAlice})
	if outcome.Status != http.StatusOK || !strings.Contains(string(outcome.Body), `"state":"in_progress"`) ||
		!strings.Contains(string(outcome.Body), `"leaseRemainingSeconds":`) {
		t.Fatalf("outcome while held: %d %s", outcome.Status, outcome.Body)
	}
	e.CheckWorks(1)

	testenv.CloseOnce(release)
	done := <-first
	if done.Status != http.StatusCreated {
		t.Fatalf("first request: %d %s", done.Status, done.Body)
	}
	replay := e.Create("key-held", body1)
	if replay.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(replay.Body, done.Body) {
		t.Fatalf("retry after the first finished: %d %s", replay.Status, replay.Body)
	}
}

// TestExpiredKeyIsANewIntent: after the TTL the same key creates a new
// request, exactly once even when two late retries race.
func TestExpiredKeyIsANewIntent(t *testing.T) {
	testenv.ForEachPath(t, testExpiredKeyIsANewIntent)
}

func testExpiredKeyIsANewIntent(t *testing.T, path idempotency.Path) {
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithPath(path))
	old := e.Create("key-ttl", body1).Request(t)
	clk.Advance(testenv.TTL - time.Second)
	if r := e.Create("key-ttl", body1); r.Header.Get("Idempotent-Replayed") != "true" || r.Request(t).ID != old.ID {
		t.Fatalf("one second before expiry: %d %s, want the replay", r.Status, r.Body)
	}
	clk.Advance(time.Second)

	start := make(chan struct{})
	var wg sync.WaitGroup
	replies := make([]testenv.Reply, 2)
	for i := range replies {
		wg.Go(func() {
			<-start
			r, err := e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-ttl"}, Body: body1})
			if err != nil {
				t.Error(err)
			}
			replies[i] = r
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for _, r := range replies {
		switch {
		case r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") == "":
			fresh++
			if r.Request(t).ID == old.ID {
				t.Fatal("the new intent answered with the expired request")
			}
		case r.Status == http.StatusCreated, r.Status == http.StatusConflict:
		default:
			t.Fatalf("late retry: %d %s", r.Status, r.Body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d fresh creations among two racing late retries, want 1", fresh)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 2 {
		t.Fatalf("%d business rows, want 2: one per intent", n)
	}
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(e.Logs.String(), `"outcome":"expired_taken_over"`) }) {
		t.Fatal("the takeover was not logged as expired_taken_over")
	}
}

// TestLeaseTakeover: a claim was left in progress by an owner that died
// (claimed, then nothing). Once its lease passed, the retry takes it over and
// creates the request once.
func TestLeaseTakeover(t *testing.T) {
	testenv.ForEachPath(t, testLeaseTakeover)
}

func testLeaseTakeover(t *testing.T, path idempotency.Path) {
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithPath(path))
	fp, err := idempotency.Fingerprint(demo.CreateInput{Topic: "topic-billing", Note: "note-call me"}.Significant())
	if err != nil {
		t.Fatal(err)
	}
	scope := idempotency.Scope{Actor: "alice", Operation: "demo-requests.create", Key: "key-crashed"}
	deadClaim := idempotency.Claim{Scope: scope, Token: uuid.NewString()}
	dead, err := e.Store.Claim(context.Background(), idempotency.Claim{Scope: scope, Token: deadClaim.Token}, fp, testenv.Lease, testenv.TTL)
	if err != nil || !dead.Wrote {
		t.Fatalf("claim of the owner that dies: %+v, %v", dead, err)
	}

	if r := e.Create("key-crashed", body1); r.Status != http.StatusConflict {
		t.Fatalf("retry within the lease: %d %s, want 409", r.Status, r.Body)
	}
	clk.Advance(testenv.Lease)
	r := e.Create("key-crashed", body1)
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after the lease: %d %s, want a fresh 201", r.Status, r.Body)
	}
	if !testenv.Eventually(2*time.Second, func() bool { return strings.Contains(e.Logs.String(), `"outcome":"lease_taken_over"`) }) {
		t.Fatal("the takeover was not logged as lease_taken_over")
	}
	// The dead owner wakes up and tries to finish: fenced out.
	zombie := demo.Request{ID: "8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11", Actor: "alice", State: "accepted", Topic: "zombie", CreatedAt: clk.Now()}
	err = e.Store.FinishClaimAtomically(context.Background(), deadClaim,
		idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte("{}")}, Effect: e.Store.CreateDemoRequest(zombie)})
	if !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("finish of the dead owner: %v, want ErrLeaseLost", err)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
}

// TestClientDisconnectAfterClaim: the client hangs up right after the claim;
// the work does not die with it, and the retry replays.
func TestClientDisconnectAfterClaim(t *testing.T) {
	testenv.ForEachPath(t, testClientDisconnectAfterClaim)
}

func testClientDisconnectAfterClaim(t *testing.T, path idempotency.Path) {
	e := testenv.New(t, testenv.WithPath(path))
	claimed, clientGone := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	e.SetHook(func(ctx context.Context, r *http.Request) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil // a retry, deciding on the one-phase path
		}
		close(claimed)
		<-r.Context().Done() // the server saw the client leave
		clientGone <- ctx.Err()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-hangup"}, Body: body1})
		errc <- err
	}()
	<-claimed
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v, want cancelled", err)
	}
	if err := <-clientGone; err != nil {
		t.Fatalf("the work's context ended with the client's: %v", err)
	}
	// The work goes on to finish on its own; the retry sees it in progress or
	// done. On the one-phase path nothing is claimed while a work decides, so
	// the retry may also commit first, and the first request then replays
	// it: either way one row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.Create("key-hangup", body1)
		if r.Status == http.StatusCreated {
			if r.Header.Get("Idempotent-Replayed") != "true" && path == idempotency.TwoPhase {
				t.Fatalf("retry ran the work again: %s", r.Body)
			}
			break
		}
		if r.Status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s", r.Status, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
		t.Fatalf("%d business rows, want 1", n)
	}
	e.CheckWorks(1)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := e.Must(testenv.Req{Method: http.MethodGet, Path: path}); r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
	}
	if r := e.Must(testenv.Req{Method: http.MethodDelete, Path: "/v1/demo-requests"}); r.Status != http.StatusMethodNotAllowed ||
		r.Problem(t) != apperr.MethodNotAllowed || r.Header.Get("Allow") != "POST" {
		t.Fatalf("DELETE: %d %v %s", r.Status, r.Header, r.Body)
	}
}

// TestWorkshopTTL: Workshop-TTL gives the key of one request a short
// replay window, so expiry shows without restarting the server; the
// server's TTL stays for every other key, and the knob is refused without
// the workshop or out of its bounds.
func TestWorkshopTTL(t *testing.T) {
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithWorkshop())
	short := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-short"}, Body: body1,
		Header: map[string]string{"Workshop-TTL": "5s"}})
	if short.Status != http.StatusCreated {
		t.Fatalf("with Workshop-TTL: %d %s", short.Status, short.Body)
	}
	long := e.Create("key-long", body1).Request(t)
	clk.Advance(4 * time.Second)
	if r := e.Create("key-short", body1); r.Header.Get("Idempotent-Replayed") != "true" || r.Request(t).ID != short.Request(t).ID {
		t.Fatalf("within its 5 s: %d %s, want the replay", r.Status, r.Body)
	}
	clk.Advance(time.Second)
	again := e.Create("key-short", body1)
	if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "" || again.Request(t).ID == short.Request(t).ID {
		t.Fatalf("past its 5 s: %d %s, want a new intent", again.Status, again.Body)
	}
	// The new intent ran without the knob: the server's TTL holds it.
	clk.Advance(time.Hour)
	if r := e.Create("key-short", body1); r.Header.Get("Idempotent-Replayed") != "true" || r.Request(t).ID != again.Request(t).ID {
		t.Fatalf("the retry of the new intent an hour on: %d %s, want the replay", r.Status, r.Body)
	}
	if r := e.Create("key-long", body1); r.Header.Get("Idempotent-Replayed") != "true" || r.Request(t).ID != long.ID {
		t.Fatalf("a key without the knob an hour on: %d %s, want the replay", r.Status, r.Body)
	}

	for _, v := range []string{"0s", "999ms", "11m", "soon", "-5s"} {
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-bad-ttl"}, Body: body1,
			Header: map[string]string{"Workshop-TTL": v}})
		if r.Status != http.StatusBadRequest || r.Problem(t) != apperr.InvalidHeader {
			t.Fatalf("Workshop-TTL: %s: %d %s, want 400 invalid_header", v, r.Status, r.Body)
		}
	}
	off := testenv.New(t)
	r := off.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-short"}, Body: body1,
		Header: map[string]string{"Workshop-TTL": "5s"}})
	if r.Status != http.StatusBadRequest || r.Problem(t) != apperr.WorkshopDisabled {
		t.Fatalf("Workshop-TTL with the workshop off: %d %s, want 400 workshop_disabled", r.Status, r.Body)
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys WHERE idem_key = 'key-bad-ttl'`); n != 0 {
		t.Fatalf("%d keys stored for refused knobs, want 0", n)
	}
}

// TestTTLCountsFromTheAnswer: a key's TTL counts from its answer, not from
// its claim. A first request held past its own TTL (Workshop-TTL: 5s) stays
// in progress; once it answers, a retry that waited (Prefer: wait) and
// retries up to the TTL later replay that answer; only past the TTL after
// the answer is the key a new intent.
func TestTTLCountsFromTheAnswer(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithWorkshop())
	claimed, release := e.Hold()
	short := map[string]string{"Workshop-TTL": "5s"}
	for k, v := range testenv.HoldHeader {
		short[k] = v
	}
	first := make(chan testenv.Reply, 1)
	go func() {
		r, err := e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-slow"}, Body: body1, Header: short})
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	<-claimed
	clk.Advance(10 * time.Second) // past the claim's TTL, well within its lease

	if r := e.Create("key-slow", body1); r.Status != http.StatusConflict || r.Problem(t) != apperr.OperationInProgress {
		t.Fatalf("a retry while the first runs past its TTL: %d %s, want 409", r.Status, r.Body)
	}
	waiter := make(chan testenv.Reply, 1)
	go func() {
		r, err := e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-slow"}, Body: body1,
			Header: map[string]string{"Prefer": "wait=10"}})
		if err != nil {
			t.Error(err)
		}
		waiter <- r
	}()
	// Whether the waiter looks before or after the first answers, it must
	// get that answer.
	testenv.CloseOnce(release)
	done := <-first
	if done.Status != http.StatusCreated {
		t.Fatalf("first request: %d %s", done.Status, done.Body)
	}
	id := done.Request(t).ID
	if r := <-waiter; r.Status != http.StatusCreated || r.Request(t).ID != id {
		t.Fatalf("the waiter: %d %s, want the first answer (%s)", r.Status, r.Body, id)
	}
	clk.Advance(4 * time.Second)
	if r := e.Create("key-slow", body1); r.Header.Get("Idempotent-Replayed") != "true" || r.Request(t).ID != id {
		t.Fatalf("a retry 4 s after the answer: %d %s, want the replay", r.Status, r.Body)
	}
	clk.Advance(time.Second)
	if r := e.Create("key-slow", body1); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" || r.Request(t).ID == id {
		t.Fatalf("a retry 5 s after the answer: %d %s, want a new intent", r.Status, r.Body)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 2 {
		t.Fatalf("%d business rows, want 2: one per intent", n)
	}
}
