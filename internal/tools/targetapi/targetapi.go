// Package targetapi is a small Idempotency-Key API kept in memory, for the
// tests of the conformance suite: a create route that keeps the contract,
// or breaks it in one named way (a Flaw), each one of the usual ways an
// implementation goes wrong. The suite must catch each flaw with the check
// made for it, and with no other. Only tests import it.
//
// The route is POST /things. The actor is the bearer token; the key is
// Idempotency-Key, quoted or bare; the fingerprint is the body's SHA-256
// (draft §2.4: a checksum of the payload). A header Target-Fail makes the
// work fail with 503 after the key was taken.
package targetapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Flaw is one way to break the contract; None keeps it.
type Flaw string

const (
	None            Flaw = ""
	KeyOptional     Flaw = "key-optional"      // runs a request that has no key
	AnyKey          Flaw = "any-key"           // takes a malformed key as it is
	FirstKeyWins    Flaw = "first-key-wins"    // takes the first of two keys
	CheckThenInsert Flaw = "check-then-insert" // looks the key up, works, then stores it: nothing claims the key meanwhile
	NoFingerprint   Flaw = "no-fingerprint"    // another body under a used key gets the first answer
	MismatchAs409   Flaw = "mismatch-409"      // another body under a used key is 409, the older habit
	Rerender        Flaw = "rerender"          // a replay renders the body again, so its bytes differ
	NoRetryAfter    Flaw = "no-retry-after"    // a 409 without Retry-After
	DiesWithClient  Flaw = "dies-with-client"  // the work stops when its client hangs up, and the key stays in progress
	GlobalKeys      Flaw = "global-keys"       // one key for every actor
	NeverExpires    Flaw = "never-expires"     // a key outlives its TTL
	StoresFailures  Flaw = "stores-failures"   // a 503 is stored and replayed
)

// Work is how long a request's work takes: the window in which a second
// request on the key meets the first still running.
const Work = 200 * time.Millisecond

// Server is the API. Its zero value is not usable: call New.
type Server struct {
	flaw Flaw
	ttl  time.Duration

	mu   sync.Mutex
	keys map[scope]*record
	made int // resources created, for their ids
}

type scope struct{ actor, key string }

// record is a key's state: claimed (done false) or answered.
type record struct {
	fingerprint [32]byte
	done        bool
	status      int
	body        []byte
	id          string    // the resource, for a re-render
	expires     time.Time // done + TTL
}

// New returns the API with flaw, keeping a completed key for ttl.
func New(flaw Flaw, ttl time.Duration) *Server {
	return &Server{flaw: flaw, ttl: ttl, keys: map[scope]*record{}}
}

// Made is the number of resources created.
func (s *Server) Made() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/things" {
		problem(w, http.StatusNotFound, "no such route")
		return
	}
	actor, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || actor == "" {
		problem(w, http.StatusUnauthorized, "no bearer token")
		return
	}
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 && s.flaw == KeyOptional {
		s.create(w, r, nil)
		return
	}
	key, ok := s.parseKey(values)
	if !ok {
		problem(w, http.StatusBadRequest, "send one Idempotency-Key of 1 to 255 visible ASCII characters")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		problem(w, http.StatusBadRequest, "unreadable body")
		return
	}
	sc := scope{actor, key}
	if s.flaw == GlobalKeys {
		sc.actor = ""
	}
	fp := sha256.Sum256(body)

	s.mu.Lock()
	rec := s.keys[sc]
	if rec != nil && rec.done && time.Now().After(rec.expires) && s.flaw != NeverExpires {
		delete(s.keys, sc) // an expired key is a new intent
		rec = nil
	}
	switch {
	case rec == nil:
		if s.flaw != CheckThenInsert {
			rec = &record{fingerprint: fp} // the claim
			s.keys[sc] = rec
		}
		s.mu.Unlock()
		s.create(w, r, func(status int, body []byte, id string) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if status >= 500 && s.flaw != StoresFailures {
				delete(s.keys, sc) // released: the same key may run again
				return
			}
			s.keys[sc] = &record{fingerprint: fp, done: true, status: status, body: body, id: id, expires: time.Now().Add(s.ttl)}
		})
	case rec.fingerprint != fp && s.flaw != NoFingerprint:
		s.mu.Unlock()
		if s.flaw == MismatchAs409 {
			problem(w, http.StatusConflict, "the key was used with another request")
			return
		}
		problem(w, http.StatusUnprocessableEntity, "the key was used with another request")
	case !rec.done:
		s.mu.Unlock()
		if s.flaw != NoRetryAfter {
			w.Header().Set("Retry-After", "1")
		}
		problem(w, http.StatusConflict, "a request with this key is in progress")
	default:
		status, body, id := rec.status, rec.body, rec.id
		s.mu.Unlock()
		if s.flaw == Rerender && id != "" {
			body = render(id)
		}
		w.Header().Set("Content-Type", "application/json")
		if id != "" {
			w.Header().Set("Location", "/things/"+id)
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(status)
		w.Write(body)
	}
}

// create does the work, answers, and hands the answer to store (nil: a
// request without a key, which stores nothing).
func (s *Server) create(w http.ResponseWriter, r *http.Request, store func(status int, body []byte, id string)) {
	ctx := context.WithoutCancel(r.Context()) // the work outlives its client
	if s.flaw == DiesWithClient {
		ctx = r.Context()
	}
	select {
	case <-time.After(Work):
	case <-ctx.Done():
		return // the key stays claimed, and answers 409 from now on
	}
	if r.Header.Get("Target-Fail") != "" {
		body := []byte(`{"title":"the work failed","status":503}`)
		if store != nil {
			store(http.StatusServiceUnavailable, body, "")
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(body)
		return
	}
	s.mu.Lock()
	s.made++
	id := fmt.Sprintf("t-%d", s.made)
	s.mu.Unlock()
	body := render(id)
	if store != nil {
		store(http.StatusCreated, body, id)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/things/"+id)
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// render is a resource's answer, with the moment it was written.
func render(id string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"renderedAt":%q}`, id, time.Now().Format(time.RFC3339Nano))
}

// parseKey reads the key header's values: one value, quoted or bare, of
// 1 to 255 visible ASCII characters.
func (s *Server) parseKey(values []string) (string, bool) {
	switch {
	case len(values) == 0:
		return "", false
	case len(values) > 1 && s.flaw != FirstKeyWins:
		return "", false
	}
	v := strings.TrimSpace(values[0])
	if s.flaw == AnyKey {
		return v, v != ""
	}
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) || strings.ContainsAny(v[1:len(v)-1], `"\`) {
			return "", false
		}
		v = v[1 : len(v)-1]
	}
	if len(v) < 1 || len(v) > 255 {
		return "", false
	}
	for i := range len(v) {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", false
		}
	}
	return v, true
}

func problem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"title":%q,"status":%d}`, title, status)
}
