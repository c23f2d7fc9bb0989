package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// withNewKeys bounds each actor's new keys to perSecond, burst at once.
func withNewKeys(perSecond float64, burst int) testenv.Option {
	return func(d *httpapi.Deps, _ *postgres.Store) { d.NewKeysPerSecond, d.NewKeysBurst = perSecond, burst }
}

// checkRateLimited fails the test unless r is a 429 rate_limited with a
// Retry-After of whole seconds, at least 1.
func checkRateLimited(t testing.TB, r testenv.Reply) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Problem(t) != apperr.RateLimited {
		t.Fatalf("%d %s, want 429 rate_limited", r.Status, r.Body)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("429 with Retry-After %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
	}
}

// TestNewKeysBounded: a burst of 1,000 new keys from one actor meets the
// bound: at most burst + rate × elapsed are stored, the rest are 429
// rate_limited with Retry-After and store nothing; another actor is not
// touched, and a key already stored is replayed over the bound.
func TestNewKeysBounded(t *testing.T) {
	testenv.Long(t, "a flood of 1,000 new keys from 50 clients; TestStoredKeyTakesNoToken answers the 429")
	testenv.ForEachPath(t, func(t *testing.T, path idempotency.Path) {
		const perSecond, burst, n = 5, 20, 1000
		e := testenv.New(t, testenv.WithPath(path), withNewKeys(perSecond, burst))
		testenv.WarmPool(t, e.DB, e.DB.Stats().MaxOpenConnections)
		statuses := make([]int, n)
		replies := make([]testenv.Reply, n)
		start := time.Now()
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 50 {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					replies[i] = e.Create(fmt.Sprintf("key-flood-%d", i), body1)
					statuses[i] = replies[i].Status
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		created, limited := 0, 0
		for i, st := range statuses {
			switch st {
			case http.StatusCreated:
				created++
			case http.StatusTooManyRequests:
				limited++
				checkRateLimited(t, replies[i])
				if rows := e.Count(`SELECT count(*) FROM idempotency_keys WHERE idem_key = $1`, fmt.Sprintf("key-flood-%d", i)); rows != 0 {
					t.Fatalf("a refused key has %d rows", rows)
				}
			default:
				t.Fatalf("key %d: %d %s", i, st, replies[i].Body)
			}
		}
		most := burst + int(perSecond*elapsed.Seconds()) + 1
		if created < burst || created > most || limited == 0 {
			t.Fatalf("%d created and %d refused in %v, want %d to %d created", created, limited, elapsed, burst, most)
		}
		if rows := e.Count(`SELECT count(*) FROM idempotency_keys WHERE actor_id = 'alice'`); rows != created {
			t.Fatalf("%d keys stored for %d created", rows, created)
		}
		if rows := e.Count(`SELECT count(*) FROM demo_requests WHERE actor_id = 'alice'`); rows != created {
			t.Fatalf("%d demo requests stored for %d created", rows, created)
		}
		t.Logf("%s: 1,000 new keys in %v: %d created, %d refused", path, elapsed.Round(time.Millisecond), created, limited)

		// Another actor has a bucket of its own.
		if r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenBob, Keys: []string{"key-bob"}, Body: body1}); r.Status != http.StatusCreated {
			t.Fatalf("bob: %d %s, want 201", r.Status, r.Body)
		}
		// A stored key is never refused by the bound, first attempt or retry.
		for i, st := range statuses {
			if st != http.StatusCreated {
				continue
			}
			for _, attempt := range []string{"1", "2"} {
				r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{fmt.Sprintf("key-flood-%d", i)}, Body: body1,
					Header: map[string]string{httpapi.HeaderClientAttempt: attempt}})
				if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("a stored key over the bound (attempt %s): %d %s, want its replay", attempt, r.Status, r.Body)
				}
			}
			if r := e.Create(fmt.Sprintf("key-flood-%d", i), `{"topic":"topic-other"}`); r.Status != http.StatusUnprocessableEntity {
				t.Fatalf("a stored key with another payload over the bound: %d %s, want 422", r.Status, r.Body)
			}
			break
		}
		metrics := e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"})
		want := fmt.Sprintf(`demo_api_idempotency_outcomes_total{operation="demo-requests.create",outcome="rate_limited",path="%s"} %d`, path, limited)
		if !strings.Contains(string(metrics.Body), want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	})
}

// TestStoredKeyTakesNoToken: a replay never spends a token, so the actor's
// next new key still finds the one left.
func TestStoredKeyTakesNoToken(t *testing.T) {
	testenv.ForEachPath(t, func(t *testing.T, path idempotency.Path) {
		e := testenv.New(t, testenv.WithPath(path), withNewKeys(0.001, 2)) // a token per 1,000 s: none comes back in a test
		if r := e.Create("key-a", body1); r.Status != http.StatusCreated {
			t.Fatalf("first key: %d %s", r.Status, r.Body)
		}
		for range 5 {
			if r := e.Create("key-a", body1); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: %d %s", r.Status, r.Body)
			}
		}
		if r := e.Create("key-b", body1); r.Status != http.StatusCreated {
			t.Fatalf("the second new key, after replays: %d %s, want 201 (a replay took a token)", r.Status, r.Body)
		}
		r := e.Create("key-c", body1)
		checkRateLimited(t, r)
		if got := r.Header.Get("Retry-After"); got != "1000" {
			t.Fatalf("Retry-After %s, want 1000 (the bucket's next token)", got)
		}
		if rows := e.Count(`SELECT count(*) FROM idempotency_keys WHERE idem_key = 'key-c'`); rows != 0 {
			t.Fatalf("the refused key has %d rows", rows)
		}
	})
}

// TestKeyStormIsOneNewKey: 200 attempts at one key released together,
// many more than the burst, all admitted before the first commits, are one
// new key: no 429, one row, one demo request.
func TestKeyStormIsOneNewKey(t *testing.T) {
	testenv.ForEachPath(t, func(t *testing.T, path idempotency.Path) {
		const n = 200
		e := testenv.New(t, testenv.WithPath(path), testenv.WithWorkshop(), withNewKeys(0.001, 1))
		testenv.WarmPool(t, e.DB, e.DB.Stats().MaxOpenConnections)
		// One phase: every attempt decides in its work, before its
		// statement; none goes on until all are there. Two phase: the
		// claim's owner is held until every other attempt has its answer.
		arrived := make(chan struct{}, n)
		all := make(chan struct{})
		t.Cleanup(func() { testenv.CloseOnce(all) })
		e.SetHook(func(ctx context.Context, r *http.Request) error {
			arrived <- struct{}{}
			<-all
			return nil
		})
		replies := make([]testenv.Reply, n)
		var answered atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				h := map[string]string{}
				if i%2 == 1 {
					h[httpapi.HeaderClientAttempt] = "2"
				}
				replies[i] = e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-storm"}, Body: body1, Header: h})
				answered.Add(1)
			})
		}
		close(start)
		switch path {
		case idempotency.OnePhase:
			for range n {
				<-arrived
			}
			testenv.CloseOnce(all)
			wg.Wait()
		case idempotency.TwoPhase:
			<-arrived
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			// All but the owner answer while it holds the claim.
			if !testenv.Eventually(time.Minute, func() bool { return answered.Load() == n-1 }) {
				t.Fatalf("%d of the other attempts answered while the owner held its claim", answered.Load())
			}
			testenv.CloseOnce(all)
			<-done
		}
		counts := map[int]int{}
		for _, r := range replies {
			counts[r.Status]++
			switch r.Status {
			case http.StatusCreated:
			case http.StatusConflict:
				if path != idempotency.TwoPhase {
					t.Fatalf("one phase: 409 %s", r.Body)
				}
			default:
				t.Fatalf("%d %s, want 201 or (two phase) 409", r.Status, r.Body)
			}
		}
		if rows := e.Count(`SELECT count(*) FROM idempotency_keys`); rows != 1 {
			t.Fatalf("%d keys stored", rows)
		}
		if rows := e.Count(`SELECT count(*) FROM demo_requests`); rows != 1 {
			t.Fatalf("%d demo requests stored", rows)
		}
		t.Logf("%s: %v", path, counts)
		// The storm spent the one token: the next new key is refused.
		checkRateLimited(t, e.Create("key-after-storm", body1))
	})
}

// TestClientRetriesRateLimited: the Go client retries a 429 within its
// budget, honouring Retry-After, and gets its 201.
func TestClientRetriesRateLimited(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, withNewKeys(1, 1))
	if r := e.Create("key-first", body1); r.Status != http.StatusCreated {
		t.Fatalf("first key: %d %s", r.Status, r.Body)
	}
	var attempts []client.Attempt
	c, err := client.New(client.Config{BaseURL: e.Srv.URL, Token: testenv.TokenAlice, HTTPClient: e.Client,
		OnAttempt: func(a client.Attempt) { attempts = append(attempts, a) }})
	if err != nil {
		t.Fatal(err)
	}
	it, _ := client.NewIntent(client.CreateInput{Topic: "topic-billing"})
	res, err := c.Send(context.Background(), it)
	if err != nil {
		t.Fatalf("client: %v (attempts %+v)", err, attempts)
	}
	if res.Status != http.StatusCreated || len(attempts) < 2 || attempts[0].Status != http.StatusTooManyRequests {
		t.Fatalf("client: %d after %+v, want a 201 after a 429", res.Status, attempts)
	}
}
