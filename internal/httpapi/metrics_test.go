package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestMetricsCountOutcomes drives every outcome through HTTP and checks the
// scrape counts each exactly as often as it happened.
func TestMetricsCountOutcomes(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithPath(idempotency.TwoPhase))

	e.Create("key-m1", body1)                              // claimed
	e.Create("key-m1", body1)                              // replayed
	e.Create("key-m1", `{"topic":"topic-other"}`)          // mismatch
	e.SetHook(func(context.Context, *http.Request) error { // claimed, then released
		return errors.New("transient")
	})
	e.Create("key-m2", body1)
	e.SetHook(nil)

	// Held past its lease: a retry takes it over (lease_taken_over) and
	// finishes; the held one then finds its lease lost.
	claimed, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { testenv.CloseOnce(release) })
	var held atomic.Bool
	e.SetHook(func(context.Context, *http.Request) error {
		if held.CompareAndSwap(false, true) { // only the first request is held
			close(claimed)
			<-release
		}
		return nil
	})
	heldReply := make(chan testenv.Reply, 1)
	go func() { heldReply <- e.Create("key-m3", body1) }() // claimed
	<-claimed
	if r := e.Create("key-m3", body1); r.Status != http.StatusConflict { // in_progress
		t.Fatalf("retry within the lease: %d", r.Status)
	}
	clk.Advance(testenv.Lease)
	if r := e.Create("key-m3", body1); r.Status != http.StatusCreated { // lease_taken_over
		t.Fatalf("retry after the lease: %d %s", r.Status, r.Body)
	}
	testenv.CloseOnce(release)
	if r := <-heldReply; r.Status != http.StatusConflict || r.Problem(t) != apperr.OperationInProgress { // lease_lost
		t.Fatalf("the held owner after losing its lease: %d %s", r.Status, r.Body)
	}
	e.SetHook(nil)

	clk.Advance(testenv.TTL)
	e.Create("key-m1", body1) // expired_taken_over

	want := map[string]int{
		"claimed": 3, "replayed": 1, "mismatch": 1, "released": 1, "in_progress": 1,
		"lease_taken_over": 1, "lease_lost": 1, "expired_taken_over": 1,
	}
	var lines []string
	for outcome, n := range want {
		lines = append(lines, `demo_api_idempotency_outcomes_total{operation="demo-requests.create",outcome="`+outcome+`",path="two_phase"} `+strconv.Itoa(n)+"\n")
	}
	lines = append(lines,
		"demo_api_idempotency_in_progress_claims 0\n",
		"demo_api_idempotency_oldest_in_progress_seconds 0\n",
		`demo_api_http_request_duration_seconds_count{route="/v1/demo-requests",status="201"} `,
		`demo_api_http_request_duration_seconds_count{route="/v1/demo-requests",status="409"} 2`,
		"demo_api_sweeper_deleted_total 0\n",
	)
	// A request's latency is observed just after its response is sent.
	var scrape string
	if !testenv.Eventually(2*time.Second, func() bool {
		scrape = string(e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"}).Body)
		return containsAll(scrape, lines)
	}) {
		for _, line := range lines {
			if !strings.Contains(scrape, line) {
				t.Errorf("scrape lacks %q", line)
			}
		}
		t.Log(scrape)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestMetricsInProgressClaims(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock()
	e := testenv.New(t, testenv.WithClock(clk), testenv.WithPath(idempotency.TwoPhase))
	claimed, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { testenv.CloseOnce(release) })
	e.SetHook(func(context.Context, *http.Request) error { close(claimed); <-release; return nil })
	done := make(chan testenv.Reply, 1)
	go func() { done <- e.Create("key-held", body1) }()
	<-claimed
	clk.Advance(7 * time.Second)
	scrape := string(e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"}).Body)
	for _, line := range []string{"demo_api_idempotency_in_progress_claims 1\n", "demo_api_idempotency_oldest_in_progress_seconds 7\n"} {
		if !strings.Contains(scrape, line) {
			t.Errorf("scrape lacks %q", line)
		}
	}
	testenv.CloseOnce(release)
	<-done
}

// TestMetricsOnePhase: the one-phase path counts its outcomes under its own
// label, and X-Client-Attempt is counted when the intent got its answer.
func TestMetricsOnePhase(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithPath(idempotency.OnePhase))
	e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-p1"}, Body: body1, Header: map[string]string{"X-Client-Attempt": "1"}})
	e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-p1"}, Body: body1, Header: map[string]string{"X-Client-Attempt": "3"}})
	lines := []string{
		`demo_api_idempotency_outcomes_total{operation="demo-requests.create",outcome="completed",path="one_phase"} 1` + "\n",
		`demo_api_idempotency_outcomes_total{operation="demo-requests.create",outcome="replayed",path="one_phase"} 1` + "\n",
		`demo_api_client_attempt_answered_count{operation="demo-requests.create"} 2` + "\n",
		`demo_api_client_attempt_answered_sum{operation="demo-requests.create"} 4` + "\n",
	}
	scrape := string(e.Must(testenv.Req{Method: http.MethodGet, Path: "/metrics"}).Body)
	for _, line := range lines {
		if !strings.Contains(scrape, line) {
			t.Errorf("scrape lacks %q", line)
		}
	}
}
