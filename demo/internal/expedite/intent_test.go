package expedite_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/demo/internal/expedite"
)

// TestIntentWaitsOutItsSteps: the expedite is an intent like the cancel
// (its own path, no body, one key on every attempt), and the 409 it answers
// while its steps wait for the review desk is retried after its
// Retry-After, with the same key, until the 201.
func TestIntentWaitsOutItsSteps(t *testing.T) {
	t.Parallel()
	var (
		mu                       sync.Mutex
		requests, keys, attempts []string
		bodies                   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		keys, attempts = append(keys, r.Header.Get("Idempotency-Key")), append(attempts, r.Header.Get("X-Client-Attempt"))
		bodies = append(bodies, string(b))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"code":"operation_in_progress","detail":"scripted"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"requestId":"8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11","state":"ordered"}`))
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL, Token: "tok", Budget: 3 * time.Second, AttemptTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	it, err := expedite.NewIntent("8a0d8f0e")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := c.Send(context.Background(), it)
	srv.Close()
	if err != nil || res.Status != http.StatusCreated || res.Attempts != 2 {
		t.Fatalf("got %+v, %v; want the 201 on the second attempt", res, err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("the retry came after %s, before the 1 s Retry-After", waited)
	}
	want := "POST /v1/demo-requests/8a0d8f0e/expedite "
	if requests[0] != want || requests[1] != want || bodies[0] != "" {
		t.Fatalf("the server saw %q with bodies %q, want %q twice with no body", requests, bodies, want)
	}
	if keys[0] == "" || keys[0] != keys[1] || !slices.Equal(attempts, []string{"1", "2"}) {
		t.Fatalf("keys %q, attempts %q: want one key, attempts 1 and 2", keys, attempts)
	}
	it, err = expedite.NewIntent("a b")
	if err != nil || it.Operation != expedite.ExpediteOperation || it.Path != "/v1/demo-requests/a%20b/expedite" {
		t.Fatalf("NewIntent(\"a b\") = %+v, %v", it, err)
	}
	if _, err := expedite.NewIntent(""); err == nil {
		t.Fatal("an expedite of no request made an intent")
	}
}
