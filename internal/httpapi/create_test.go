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

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

const body1 = `{"topic":"topic-billing","note":"note-call me"}`

func TestCreateBranches(t *testing.T) {
	testenv.ForEachPath(t, testCreateBranches)
}

func testCreateBranches(t *testing.T, path idempotency.Path) {
	t.Run("first request claims: 201, Location, the request", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		r := e.Create("key-first", body1)
		if r.Status != http.StatusCreated {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		dr := r.Request(t)
		if dr.State != "accepted" || dr.Topic != "topic-billing" || dr.Note != "note-call me" || dr.CreatedAt.IsZero() {
			t.Fatalf("created %+v", dr)
		}
		if loc := r.Header.Get("Location"); loc != "/v1/demo-requests/"+dr.ID {
			t.Fatalf("Location %q", loc)
		}
		if r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("a first response says it is replayed")
		}
		got := e.Must(testenv.Req{Method: http.MethodGet, Path: r.Header.Get("Location"), Token: testenv.TokenAlice})
		read := got.Request(t)
		if got.Status != http.StatusOK || read.Delivery != "pending" {
			t.Fatalf("GET Location = %d %s, want the created request, its delivery pending", got.Status, got.Body)
		}
		if read.Delivery = ""; read != dr {
			t.Fatalf("GET Location = %s, want the created request %+v", got.Body, dr)
		}
	})

	t.Run("retry after completion replays byte for byte", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		first := e.Create("key-replay", body1)
		retries := []testenv.Reply{
			e.Create("key-replay", body1),
			e.Create(`"key-replay"`, body1), // the structured-field form names the same key
			e.Create("key-replay", "{\n  \"note\": \"note-call me\",\n  \"topic\": \"topic-billing\",\n  \"clientLabel\": \"retry 3\"\n}"),
		}
		for i, r := range retries {
			if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
				t.Fatalf("retry %d: %d %s, want %d %s", i, r.Status, r.Body, first.Status, first.Body)
			}
			if r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("Location") != first.Header.Get("Location") ||
				r.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
				t.Fatalf("retry %d headers %v", i, r.Header)
			}
		}
		e.CheckWorks(1)
		if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})

	t.Run("same key, different payload: 422 and nothing runs or changes", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		first := e.Create("key-mismatch", body1)
		r := e.Create("key-mismatch", `{"topic":"topic-other","note":"note-call me"}`)
		if r.Status != http.StatusUnprocessableEntity || r.Problem(t) != apperr.KeyPayloadMismatch {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		e.CheckWorks(1)
		if again := e.Create("key-mismatch", body1); !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("the mismatch changed the stored response: %s", again.Body)
		}
	})

	t.Run("a refusal after the claim is stored and replayed", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		r := e.Create("key-refused", `{"topic":"blocked"}`)
		if r.Status != http.StatusUnprocessableEntity || r.Problem(t) != apperr.TopicRefused {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		again := e.Create("key-refused", `{"topic":"blocked"}`)
		if again.Status != r.Status || !bytes.Equal(again.Body, r.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry of a refusal: %d %s %v", again.Status, again.Body, again.Header)
		}
		e.CheckWorks(1)
		if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 0 {
			t.Fatalf("%d business rows for a refusal", n)
		}
	})

	t.Run("a transient failure after the claim releases the key", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		e.SetHook(func(context.Context, *http.Request) error { return errors.New("database went away") })
		r := e.Create("key-transient", body1)
		if r.Status != http.StatusInternalServerError || r.Problem(t) != apperr.Internal {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		if strings.Contains(string(r.Body), "database went away") {
			t.Fatal("an internal error reached the client")
		}
		if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("%d keys stored after a transient failure, want 0", n)
		}
		e.SetHook(nil)
		if again := e.Create("key-transient", body1); again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after release: %d %s", again.Status, again.Body)
		}
		if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})

	t.Run("workshop failure after the claim: 503 with Retry-After, then the retry runs", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path), testenv.WithWorkshop())
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-ws-fail"}, Body: body1,
			Header: map[string]string{"Workshop-Fail": "after-claim"}})
		if r.Status != http.StatusServiceUnavailable || r.Problem(t) != apperr.Unavailable || r.Header.Get("Retry-After") != "1" {
			t.Fatalf("status %d %v: %s", r.Status, r.Header, r.Body)
		}
		if again := e.Create("key-ws-fail", body1); again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %s", again.Status, again.Body)
		}
	})

	t.Run("workshop headers are refused unless enabled", func(t *testing.T) {
		e := testenv.New(t, testenv.WithPath(path))
		r := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-ws"}, Body: body1,
			Header: map[string]string{"Workshop-Delay": "1s"}})
		if r.Status != http.StatusBadRequest || r.Problem(t) != apperr.WorkshopDisabled {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
			t.Fatal("a refused workshop request stored its key")
		}
	})
}

// TestRejectedBeforeClaim: every bad request is answered with a problem
// before the key is claimed, and stores nothing.
func TestRejectedBeforeClaim(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	big := `{"topic":"topic-x","note":"` + strings.Repeat("n", 70<<10) + `"}`
	tests := []struct {
		name   string
		rq     testenv.Req
		status int
		code   string
		detail string // a part of the problem's detail, if given
	}{
		{"no token", testenv.Req{Token: "", Keys: []string{"key-a"}, Body: body1}, 401, apperr.Unauthorized, ""},
		{"unknown token", testenv.Req{Token: "tok-nobody", Keys: []string{"key-a"}, Body: body1}, 401, apperr.Unauthorized, ""},
		{"no key", testenv.Req{Body: body1}, 400, apperr.KeyMissing, ""},
		{"key twice", testenv.Req{Keys: []string{"key-a", "key-a"}, Body: body1}, 400, apperr.KeyInvalid, ""},
		{"key too long", testenv.Req{Keys: []string{strings.Repeat("k", 256)}, Body: body1}, 400, apperr.KeyInvalid, ""},
		{"key with a space", testenv.Req{Keys: []string{`"key a"`}, Body: body1}, 400, apperr.KeyInvalid, ""},
		{"bad JSON", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"x" "note"}`}, 400, apperr.MalformedJSON, ""},
		{"cut-off JSON", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":`}, 400, apperr.MalformedJSON, "ends before"},
		{"NUL in a field", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"a\u0000b"}`}, 400, apperr.InvalidField, "NUL"},
		{"invalid UTF-8", testenv.Req{Keys: []string{"key-a"}, Body: "{\"topic\":\"a\xffb\"}"}, 400, apperr.MalformedJSON, "UTF-8"},
		{"a lone surrogate", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"a\ud800b"}`}, 400, apperr.InvalidField, "surrogate"},
		{"a lone low surrogate", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"\udc00"}`}, 400, apperr.InvalidField, "surrogate"},
		{"only zero-width characters", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"\u200b\u200d\ufeff"}`}, 400, apperr.InvalidField, "empty"},
		{"another charset", testenv.Req{Keys: []string{"key-a"}, Body: body1, Header: map[string]string{"Content-Type": "application/json; charset=latin1"}}, 415, apperr.UnsupportedMediaType, "UTF-8"},
		{"two JSON values", testenv.Req{Keys: []string{"key-a"}, Body: body1 + body1}, 400, apperr.MalformedJSON, ""},
		{"not an object", testenv.Req{Keys: []string{"key-a"}, Body: `["topic"]`}, 400, apperr.MalformedJSON, ""},
		{"unknown field", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"topic-x","priority":1}`}, 400, apperr.UnknownField, ""},
		{"field name in another case", testenv.Req{Keys: []string{"key-a"}, Body: `{"TOPIC":"topic-x"}`}, 400, apperr.UnknownField, ""},
		{"field twice", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"topic-x","topic":"topic-y"}`}, 400, apperr.InvalidField, ""},
		{"null field", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"topic-x","note":null}`}, 400, apperr.InvalidField, ""},
		{"empty body", testenv.Req{Keys: []string{"key-a"}, Header: map[string]string{"Content-Type": "application/json"}}, 400, apperr.MalformedJSON, ""},
		{"wrong type", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":42}`}, 400, apperr.InvalidField, ""},
		{"empty topic", testenv.Req{Keys: []string{"key-a"}, Body: `{"topic":"  ","note":"note-x"}`}, 400, apperr.InvalidField, ""},
		{"missing topic", testenv.Req{Keys: []string{"key-a"}, Body: `{"note":"note-x"}`}, 400, apperr.InvalidField, ""},
		{"too large", testenv.Req{Keys: []string{"key-a"}, Body: big}, 413, apperr.BodyTooLarge, ""},
		{"wrong content type", testenv.Req{Keys: []string{"key-a"}, Body: body1, Header: map[string]string{"Content-Type": "text/plain"}}, 415, apperr.UnsupportedMediaType, ""},
		{"workshop header, workshop off", testenv.Req{Keys: []string{"key-a"}, Body: body1, Header: map[string]string{"Workshop-Fail": "after-claim"}}, 400, apperr.WorkshopDisabled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rq := tt.rq
			rq.Path = "/v1/demo-requests"
			if tt.code != apperr.Unauthorized {
				rq.Token = testenv.TokenAlice
			}
			r := e.Must(rq)
			if r.Status != tt.status || r.Problem(t) != tt.code || !strings.Contains(string(r.Body), tt.detail) {
				t.Fatalf("status %d: %s; want %d %s saying %q", r.Status, r.Body, tt.status, tt.code, tt.detail)
			}
			if tt.status == 401 && r.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	if n := e.Count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored by rejected requests, want 0", n)
	}
	if n := e.Works.Load(); n != 0 {
		t.Fatalf("the work ran %d times for rejected requests", n)
	}
}

func TestActorsAreScoped(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	alice := e.Create("key-shared", body1).Request(t)
	bobReply := e.Must(testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenBob, Keys: []string{"key-shared"}, Body: `{"topic":"topic-other"}`})
	if bobReply.Status != http.StatusCreated || bobReply.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("bob's first use of a key alice used: %d %s", bobReply.Status, bobReply.Body)
	}
	bob := bobReply.Request(t)
	if bob.ID == alice.ID {
		t.Fatal("bob got alice's request")
	}
	for _, path := range []string{"/v1/demo-requests/" + alice.ID, "/v1/demo-requests/not-a-uuid", "/v1/demo-requests/urn:uuid:" + alice.ID,
		"/v1/demo-requests/6c3d6e3e-2b52-4f79-9a4c-0f0d3c3f7a10"} {
		r := e.Must(testenv.Req{Method: http.MethodGet, Path: path, Token: testenv.TokenBob})
		if r.Status != http.StatusNotFound || r.Problem(t) != apperr.NotFound {
			t.Fatalf("bob GET %s: %d %s", path, r.Status, r.Body)
		}
	}
}

func TestOutcomeRoute(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	get := func(token, key, query string) testenv.Reply {
		return e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/idempotency-keys/" + key + query, Token: token})
	}
	if r := get(testenv.TokenAlice, "key-never", ""); r.Status != http.StatusNotFound || r.Problem(t) != apperr.NotFound {
		t.Fatalf("unknown key: %d %s", r.Status, r.Body)
	}
	dr := e.Create("key-outcome", body1).Request(t)
	r := get(testenv.TokenAlice, "key-outcome", "?operation=demo-requests.create")
	if r.Status != http.StatusOK {
		t.Fatalf("completed key: %d %s", r.Status, r.Body)
	}
	for _, want := range []string{`"state":"completed"`, `"status":201`, `"resultId":"` + dr.ID + `"`, `"expiresAt":`} {
		if !strings.Contains(string(r.Body), want) {
			t.Fatalf("outcome %s lacks %s", r.Body, want)
		}
	}
	if r := get(testenv.TokenBob, "key-outcome", ""); r.Status != http.StatusNotFound {
		t.Fatalf("bob sees alice's key: %d %s", r.Status, r.Body)
	}
	// A key with a percent sign, percent-encoded in the path, is found once decoded.
	e.Create("key-100%41", body1)
	if r := get(testenv.TokenAlice, "key-100%2541", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"key":"key-100%41"`) {
		t.Fatalf("key with a percent sign: %d %s", r.Status, r.Body)
	}
	if r := get(testenv.TokenAlice, "key-outcome", "?operation=nope"); r.Status != http.StatusBadRequest || r.Problem(t) != apperr.InvalidQuery {
		t.Fatalf("unknown operation: %d %s", r.Status, r.Body)
	}
	if n := e.Works.Load(); n != 2 {
		t.Fatalf("the outcome route ran work: %d works for 2 creates", n)
	}
	if n := e.Count(`SELECT count(*) FROM demo_requests`); n != 2 {
		t.Fatalf("%d business rows for 2 creates", n)
	}
}

// TestConcurrentSameKey releases N requests with one key together: exactly
// one business row, and every answer is the creation, its replay, or 409. On
// the one-phase path a duplicate waits on the unique index for the first
// commit and then replays, so nearly none gets a 409.
func TestConcurrentSameKey(t *testing.T) {
	testenv.ForEachPath(t, testConcurrentSameKey)
}

func testConcurrentSameKey(t *testing.T, path idempotency.Path) {
	for _, n := range []int{2, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			e := testenv.New(t, testenv.WithPath(path))
			start := make(chan struct{})
			replies := make([]testenv.Reply, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					replies[i], errs[i] = e.Do(context.Background(), testenv.Req{Path: "/v1/demo-requests", Token: testenv.TokenAlice, Keys: []string{"key-storm"}, Body: body1})
				})
			}
			close(start)
			wg.Wait()
			var created, replayed, busy, unavailable int
			var id string
			for i, r := range replies {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				switch {
				case r.Status == http.StatusCreated:
					if got := r.Request(t).ID; id != "" && got != id {
						t.Fatalf("two different requests created: %s and %s", id, got)
					} else {
						id = got
					}
					if r.Header.Get("Idempotent-Replayed") == "true" {
						replayed++
					} else {
						created++
					}
				case r.Status == http.StatusConflict && r.Problem(t) == apperr.OperationInProgress:
					if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
						t.Fatalf("409 with Retry-After %q", r.Header.Get("Retry-After"))
					}
					busy++
				case r.Status == http.StatusServiceUnavailable && r.Problem(t) == apperr.Unavailable:
					// A duplicate that waited on the first's row past its
					// statement's bound (a loaded machine): transient, stored
					// nothing, and the rows below must still be one.
					if r.Header.Get("Retry-After") == "" {
						t.Fatalf("503 without Retry-After")
					}
					unavailable++
				default:
					t.Fatalf("unexpected answer %d %s", r.Status, r.Body)
				}
			}
			if created != 1 {
				t.Fatalf("%d first responses, want 1 (replayed %d, busy %d)", created, replayed, busy)
			}
			if rows := e.Count(`SELECT count(*) FROM demo_requests WHERE actor_id = 'alice'`); rows != 1 {
				t.Fatalf("%d business rows, want 1", rows)
			}
			e.CheckWorks(1)
			if path == idempotency.OnePhase && busy > n/10 {
				t.Fatalf("one phase: %d of %d duplicates got 409, want nearly all replays", busy, n-1)
			}
			t.Logf("%s, %d requests: 1 created, %d replayed, %d in progress, %d unavailable", path, n, replayed, busy, unavailable)
		})
	}
}
