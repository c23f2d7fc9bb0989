package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/service"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// serveInProcess runs demo-api serve through run() on a fresh database and
// returns its base URL and the database.
// TestClientAgainstTheServer runs the Go client against the real server
// over loopback: each case ends with exactly the business rows the contract
// allows, and every attempt of an intent carried its one key.
func TestClientAgainstTheServer(t *testing.T) {
	testenv.Long(t, "a long end-to-end run of the client against the testenv.Binary")
	t.Parallel()
	ctx := context.Background()
	base, db := testenv.ServeInProcess(t, run)
	newClient := func(url string, budget, attempt time.Duration) *client.Client {
		c, err := client.New(client.Config{BaseURL: url, Token: testenv.TokenAlice, Budget: budget, AttemptTimeout: attempt})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hold := func(key, delay string) chan struct{} { // a first request of key, held in its work
		done := make(chan struct{})
		go func() {
			defer close(done)
			testenv.PostCreate(ctx, base, testenv.TokenAlice, key, `{"topic":"client"}`, "Workshop-Delay", delay)
		}()
		testenv.Eventually(5*time.Second, func() bool {
			return testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, key) == 1
		})
		return done
	}
	intent := func(key string) *client.Intent {
		it, _ := client.NewIntent(client.CreateInput{Topic: "client"})
		if key != "" {
			it.Key = key
		}
		return it
	}

	t.Run("lost response: the retry gets the replay", func(t *testing.T) {
		before := testenv.Rows(t, db)
		rec := &testenv.Recorder{Add: map[string]map[string]string{"1": {"Workshop-Drop-Response": "true"}}}
		it := intent("")
		res, err := newClient(rec.Proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		if err != nil || !res.Replayed || res.Attempts != 2 {
			t.Fatalf("got %+v, %v; want the replay on attempt 2", res, err)
		}
		rec.CheckAttempts(t, it.Key)
		if n := testenv.Rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("in progress, with Prefer: wait", func(t *testing.T) {
		before := testenv.Rows(t, db)
		it := intent("client-wait")
		// Held 1 s; an attempt of 3 s asks to wait 2 s, so the first
		// attempt gets the answer even on a busy machine.
		done := hold(it.Key, "1s")
		res, err := newClient(base, 6*time.Second, 3*time.Second).Send(ctx, it)
		<-done
		if err != nil || !res.Replayed || !res.Waited {
			t.Fatalf("got %+v, %v; want the replay after waiting", res, err)
		}
		if n := testenv.Rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("in progress, without waiting: retries after Retry-After", func(t *testing.T) {
		before := testenv.Rows(t, db)
		it := intent("client-409")
		done := hold(it.Key, "1500ms")
		var statuses []int
		c, _ := client.New(client.Config{BaseURL: base, Token: testenv.TokenAlice, Budget: 3 * time.Second, AttemptTimeout: time.Second,
			OnAttempt: func(a client.Attempt) { statuses = append(statuses, a.Status) }})
		res, err := c.Send(ctx, it)
		<-done
		if err != nil || !res.Replayed || statuses[0] != http.StatusConflict {
			t.Fatalf("got %+v, %v, statuses %v; want a 409, then the replay", res, err, statuses)
		}
		if n := testenv.Rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("a released 503, then success", func(t *testing.T) {
		before := testenv.Rows(t, db)
		rec := &testenv.Recorder{Add: map[string]map[string]string{"1": {"Workshop-Fail": "after-claim"}}}
		it := intent("")
		res, err := newClient(rec.Proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		if err != nil || res.Replayed || res.Attempts != 2 {
			t.Fatalf("got %+v, %v; want a fresh 201 on attempt 2", res, err)
		}
		rec.CheckAttempts(t, it.Key)
		if n := testenv.Rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})

	t.Run("422 mismatch: not retried", func(t *testing.T) {
		testenv.PostCreate(ctx, base, testenv.TokenAlice, "client-mismatch", `{"topic":"first"}`)
		before := testenv.Rows(t, db)
		rec := &testenv.Recorder{}
		it := intent("client-mismatch")
		_, err := newClient(rec.Proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, it)
		var p *client.ProblemError
		if !errors.As(err, &p) || p.Code != "key_payload_mismatch" || len(rec.Posts) != 1 {
			t.Fatalf("got %v after %d attempts; want one 422", err, len(rec.Posts))
		}
		if n := testenv.Rows(t, db) - before; n != 0 {
			t.Fatalf("%d rows, want 0", n)
		}
	})

	t.Run("no answer within the budget: outcome unknown, then Resolve", func(t *testing.T) {
		before := testenv.Rows(t, db)
		rec := &testenv.Recorder{Add: map[string]map[string]string{"1": {"Workshop-Delay": "3s"}}}
		it := intent("")
		c := newClient(rec.Proxy(t, base), 1500*time.Millisecond, time.Second)
		_, err := c.Send(ctx, it)
		var unknown *client.OutcomeUnknownError
		if !errors.As(err, &unknown) || unknown.Key != it.Key {
			t.Fatalf("got %v, want outcome unknown for %s", err, it.Key)
		}
		rec.CheckAttempts(t, it.Key)
		var o client.Outcome
		if !testenv.Eventually(10*time.Second, func() bool {
			o, err = c.Resolve(ctx, it.Operation, it.Key)
			return err == nil && o.State == "completed"
		}) {
			t.Fatalf("resolve: %+v, %v", o, err)
		}
		if o.Status != http.StatusCreated || o.ResultID == "" {
			t.Fatalf("resolved %+v, want the 201 and its request", o)
		}
		if n := testenv.Rows(t, db) - before; n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
		if never, err := c.Resolve(ctx, client.OperationCreate, "never-sent"); err != nil || never.State != "unknown" {
			t.Fatalf("resolve of a key never sent: %+v, %v", never, err)
		}
	})
	// created makes a request to cancel, straight to the server.
	created := func() string {
		_, body, err := testenv.PostCreate(ctx, base, testenv.TokenAlice, uuid.NewString(), `{"topic":"to cancel"}`)
		var dr client.DemoRequest
		if err != nil || json.Unmarshal(body, &dr) != nil || dr.RequestID == "" {
			t.Fatalf("create a request to cancel: %v %s", err, body)
		}
		return dr.RequestID
	}

	t.Run("cancel: a lost response, then the retry replays; a second cancel is refused, not retried", func(t *testing.T) {
		id := created()
		rec := &testenv.Recorder{Add: map[string]map[string]string{"1": {"Workshop-Drop-Response": "true"}}}
		it, err := client.NewCancelIntent(id)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(rec.Proxy(t, base), 5*time.Second, 2*time.Second)
		res, err := c.Send(ctx, it)
		if err != nil || !res.Replayed || res.Attempts != 2 || res.Status != http.StatusOK || res.Request.State != "cancelled" {
			t.Fatalf("got %+v, %v; want the replay of the 200 on attempt 2", res, err)
		}
		rec.CheckAttempts(t, it.Key)
		if want := "/v1/demo-requests/" + id + "/cancel"; rec.Posts[0].Path != want || rec.Posts[1].Path != want {
			t.Fatalf("the attempts went to %+v, want %s", rec.Posts, want)
		}
		if n := testenv.Count(t, db, `SELECT count(*) FROM demo_requests WHERE id = $1 AND state = 'cancelled' AND cancelled_at = $2`,
			id, res.Request.CancelledAt); n != 1 {
			t.Fatalf("the request is not cancelled at the time the replay says (%v)", res.Request.CancelledAt)
		}
		if n := testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE operation = $1 AND idem_key = $2 AND status_code = 200`,
			client.OperationCancel, it.Key); n != 1 {
			t.Fatalf("%d completed cancel keys %s, want 1", n, it.Key)
		}

		again := &testenv.Recorder{}
		next, _ := client.NewCancelIntent(id)
		_, err = newClient(again.Proxy(t, base), 5*time.Second, 2*time.Second).Send(ctx, next)
		if p, ok := errors.AsType[*client.ProblemError](err); !ok || p.Status != 422 || p.Code != "request_not_cancellable" || len(again.Posts) != 1 {
			t.Fatalf("a second cancel: %v after %d attempts; want one 422 request_not_cancellable", err, len(again.Posts))
		}
		if again.Posts[0].Key == it.Key {
			t.Fatal("Cancel reused the first cancel's key; a new cancel is a new intent")
		}
	})

	t.Run("send --cancel: done, refused, outcome unknown, and --resolve of the cancel's key", func(t *testing.T) {
		id := created()
		send := func(args ...string) (string, error) {
			var out strings.Builder
			err := run(ctx, append([]string{"send", "--base", base, "--token", testenv.TokenAlice}, args...), func(string) string { return "" }, &out, io.Discard)
			return out.String(), err
		}
		if out, err := send("--cancel", id, "--key", "send-cancel-"+id); err != nil || !strings.Contains(out, "cancelled: request "+id+" (200) after 1 attempt") {
			t.Fatalf("send --cancel: %v\n%s", err, out)
		}
		out, err := send("--cancel", id)
		if e, ok := errors.AsType[*service.ExitError](err); !ok || e.Code != service.ExitRefused || !strings.Contains(out, "refused: 422 request_not_cancellable") {
			t.Fatalf("a second send --cancel: %v, want exit %d\n%s", err, service.ExitRefused, out)
		}
		resolve := func(key, operation, want string) {
			t.Helper()
			if out, err := send("--resolve", key, "--operation", operation); err != nil || !strings.Contains(out, want) {
				t.Fatalf("send --resolve %s --operation %s: %v\n%s\nwant %q", key, operation, err, out, want)
			}
		}
		resolve("send-cancel-"+id, client.OperationCancel, "completed with 200, request "+id)
		resolve("send-cancel-"+id, client.OperationCreate, "never seen") // a key is scoped to its operation

		// A cancel held past the budget: exit 3, and the hint names the
		// cancel's operation, whose key then resolves to the 200.
		other := created()
		out, err = send("--cancel", other, "--key", "send-cancel-held", "--header", "Workshop-Delay: 3s", "--budget", "1500ms", "--attempt-timeout", "1s")
		if e, ok := errors.AsType[*service.ExitError](err); !ok || e.Code != service.ExitUnknown || !strings.Contains(out, "--resolve send-cancel-held --operation "+client.OperationCancel) {
			t.Fatalf("a held send --cancel: %v, want exit %d with the hint\n%s", err, service.ExitUnknown, out)
		}
		if !testenv.Eventually(10*time.Second, func() bool {
			out, err = send("--resolve", "send-cancel-held", "--operation", client.OperationCancel)
			return err == nil && strings.Contains(out, "completed with 200, request "+other)
		}) {
			t.Fatalf("resolve of the held cancel: %v\n%s", err, out)
		}
	})
}

// TestSendRateLimited: demo-api send against a server whose bound on new
// keys its actor has met gets 429 on every attempt; it says so, that
// nothing was stored and when to send again, and exits 4, not "outcome
// unknown". Nothing is stored under the key.
func TestSendRateLimited(t *testing.T) {
	testenv.Long(t, "demo-api send against a real server over its bound")
	t.Parallel()
	ctx := context.Background()
	// One new key, then one every 20 s.
	base, db := testenv.ServeInProcess(t, run, "NEW_KEYS_PER_SECOND=0.05", "NEW_KEYS_BURST=1")
	if resp, body, err := testenv.PostCreate(ctx, base, testenv.TokenAlice, "spends-the-burst", `{"topic":"client"}`); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the first new key: %v %s", err, body)
	}
	var out strings.Builder
	err := run(ctx, []string{"send", "--base", base, "--token", testenv.TokenAlice, "--key", "send-limited", "--budget", "2s", "--attempt-timeout", "1s"},
		func(string) string { return "" }, &out, io.Discard)
	if e, ok := errors.AsType[*service.ExitError](err); !ok || e.Code != service.ExitRateLimited {
		t.Fatalf("send over the bound: %v, want exit %d\n%s", err, service.ExitRateLimited, out.String())
	}
	if !regexp.MustCompile(`Send again after (1[0-9]|20) s`).MatchString(out.String()) {
		t.Fatalf("send over the bound does not say when to send again (the server's Retry-After, 20 s or less):\n%s", out.String())
	}
	for _, want := range []string{"rate limited", "nothing stored", "--key send-limited"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("send over the bound printed no %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "outcome unknown") {
		t.Fatalf("send over the bound calls it outcome unknown:\n%s", out.String())
	}
	if n := testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = 'send-limited'`); n != 0 {
		t.Fatalf("%d keys stored under send-limited, want none", n)
	}
}
