package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCancel is the second operation: idempotent on a state change. The
// first cancel with a key answers 200 and its retries replay that answer; a
// new key on a cancelled request gets a stored refusal.
func TestCancel(t *testing.T) {
	testenv.ForEachPath(t, testCancel)
}

func testCancel(t *testing.T, path idempotency.Path) {
	e := testenv.New(t, testenv.WithPath(path))
	id := e.Create("key-c0", body1).Request(t).ID
	cancel := func(token, key, id string) testenv.Reply {
		return e.Must(testenv.Req{Path: "/v1/demo-requests/" + id + "/cancel", Token: token, Keys: []string{key}})
	}

	first := cancel(testenv.TokenAlice, "key-c1", id)
	if first.Status != http.StatusOK || first.Request(t).State != "cancelled" || first.Request(t).CancelledAt == nil {
		t.Fatalf("first cancel: %d %s", first.Status, first.Body)
	}
	if again := cancel(testenv.TokenAlice, "key-c1", id); again.Status != http.StatusOK || !bytes.Equal(again.Body, first.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of the cancel: %d %v %s, want the replay", again.Status, again.Header, again.Body)
	}
	refused := cancel(testenv.TokenAlice, "key-c2", id)
	if refused.Status != http.StatusUnprocessableEntity || refused.Problem(t) != apperr.NotCancellable {
		t.Fatalf("cancel of a cancelled request with a new key: %d %s", refused.Status, refused.Body)
	}
	if again := cancel(testenv.TokenAlice, "key-c2", id); !bytes.Equal(again.Body, refused.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of the refusal: %d %s, want its replay", again.Status, again.Body)
	}
	other := e.Create("key-c3", body1).Request(t).ID
	if r := cancel(testenv.TokenAlice, "key-c1", other); r.Status != http.StatusUnprocessableEntity || r.Problem(t) != apperr.KeyPayloadMismatch {
		t.Fatalf("a cancel key reused for another request: %d %s", r.Status, r.Body)
	}
	if r := cancel(testenv.TokenBob, "key-c4", other); r.Status != http.StatusNotFound || r.Problem(t) != apperr.NotFound {
		t.Fatalf("bob cancels alice's request: %d %s", r.Status, r.Body)
	}
	got := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + other, Token: testenv.TokenAlice}).Request(t)
	if got.State != "accepted" {
		t.Fatalf("the mismatched and the foreign cancel changed the request: %+v", got)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests WHERE state = 'cancelled'`); n != 1 {
		t.Fatalf("%d cancelled rows, want 1", n)
	}
}

// TestConcurrentCancels: cancels of one request under different keys race;
// exactly one cancels it, the others get the stored refusal.
func TestConcurrentCancels(t *testing.T) {
	testenv.ForEachPath(t, func(t *testing.T, path idempotency.Path) {
		e := testenv.New(t, testenv.WithPath(path))
		id := e.Create("key-cc", body1).Request(t).ID
		const n = 8
		replies := make([]testenv.Reply, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				replies[i], _ = e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests/" + id + "/cancel", Token: testenv.TokenAlice,
					Keys: []string{"key-cancel-" + string(rune('a'+i))}})
			})
		}
		close(start)
		wg.Wait()
		cancelled, refused := 0, 0
		for _, r := range replies {
			switch {
			case r.Status == http.StatusOK:
				cancelled++
			case r.Status == http.StatusUnprocessableEntity && r.Problem(t) == apperr.NotCancellable:
				refused++
			case r.Status == http.StatusServiceUnavailable && r.Problem(t) == apperr.Unavailable:
				// the cancel decided on a read that changed: released, retry
			default:
				t.Fatalf("cancel: %d %s", r.Status, r.Body)
			}
		}
		if cancelled != 1 {
			t.Fatalf("%d cancels answered 200, want exactly 1 (%d refused)", cancelled, refused)
		}
		t.Logf("%s: 1 cancelled, %d refused, %d to retry", path, refused, n-1-refused)
	})
}
