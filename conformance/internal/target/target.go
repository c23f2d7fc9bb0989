// Package target is a small Idempotency-Key API kept in memory, for the
// suite's own tests: it keeps the contract, or breaks it in one named way
// (a Flaw), each a way a real implementation went wrong. It counts the
// results each intent made, as a target's database would, and writes the
// counts to files that a --count-cmd reads.
//
// Routes: POST /things (a create; its body's "ref" names the intent),
// POST /things/{id}/close (a setup step, no key), and
// POST /things/{id}/reopen (a state change: closed to open, counted per
// thing; a thing not closed is refused with 422, stored). The actor is the
// bearer token, alice or bob; the key is Idempotency-Key, quoted or bare. A
// header Target-Fail makes the work answer 503 after the key was taken.
package target

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Flaw is one way to break the contract; Correct keeps it.
type Flaw string

const (
	Correct           Flaw = "correct"
	StormDuplicates   Flaw = "storm-duplicates"    // looks the key up, works, then stores it: a storm runs many times
	RareStorm         Flaw = "rare-storm"          // as StormDuplicates on 1 key in 6, chosen at random: a race a storm meets now and then
	HangUpWindow      Flaw = "hang-up-window"      // a hang-up inside a Window of the work, from WindowAt, loses the completion: the result is made, the key released, and the retry runs again
	LostResult        Flaw = "lost-result"         // after a hang-up the work makes its result, but the completion fails and the key stays in progress
	EmptyCreated      Flaw = "empty-created"       // not a flaw: a create answers 201 with Location and no body
	NoContent         Flaw = "no-content"          // not a flaw: a create answers 204, naming nothing
	CommitThenRelease Flaw = "commit-then-release" // writes its completion on the request's context: a hang-up after the commit releases the key, and the retry runs again
	DiesWithClient    Flaw = "dies-with-client"    // the work stops when its client hangs up, and the key stays in progress
	GlobalLeak        Flaw = "global-leak"         // one key for every actor: another actor gets the first actor's answer
	GlobalRefuse      Flaw = "global-refuse"       // one key for every actor: another actor is refused, nothing leaked
	HTML              Flaw = "html"                // a static page: 200 text/html to everything
	NoID              Flaw = "no-id"               // no idempotency at all: runs every request, answers the same body with no id
	StoresFailures    Flaw = "stores-failures"     // a 503 is stored and replayed
	Rerender          Flaw = "rerender"            // a replay renders the body again, with a fresh time
	NoFingerprint     Flaw = "no-fingerprint"      // another body under a used key gets the first answer
	LongRetryAfter    Flaw = "long-retry-after"    // the work takes LongWork and a 409 says Retry-After: 2
	KeyOptional       Flaw = "key-optional"        // a request without a key runs, unprotected
	AnyKey            Flaw = "any-key"             // takes a malformed key, or the first of two, as it is
	MismatchAs409     Flaw = "mismatch-409"        // another body under a used key is 409, the older habit
	NoRetryAfter      Flaw = "no-retry-after"      // a 409 without Retry-After
	NeverExpires      Flaw = "never-expires"       // a key outlives its TTL
	Hang              Flaw = "hang"                // never answers
)

// The work's length: the window in which a second request on the key meets
// the first still running, and a hang-up lands inside the work.
const (
	Work     = 60 * time.Millisecond
	LongWork = 1500 * time.Millisecond
	Window   = 10 * time.Millisecond // HangUpWindow's
)

// Server is the API. Its zero value is not usable: call New.
type Server struct {
	flaw     Flaw
	ttl      time.Duration
	countDir string

	// WindowAt is where HangUpWindow's Window begins, from the work's
	// start: set it before serving.
	WindowAt time.Duration

	mu     sync.Mutex
	racy   map[scope]bool // RareStorm: the keys whose storm races
	keys   map[scope]*record
	things map[string]*thing
	counts map[string]int // results per ref (creates) and transitions per thing (reopens)
	made   int
}

type scope struct{ actor, key string }

// record is a key's state: claimed (done false) or answered.
type record struct {
	actor       string
	fingerprint [32]byte
	done        bool
	answer      answer
	expires     time.Time
}

type answer struct {
	status int
	body   []byte
	id     string // the thing, for a Location and a re-render
	ref    string
}

type thing struct {
	actor, ref, state string
}

// New returns the API with flaw, keeping a completed key for ttl, and
// writing each count to countDir/<ref or thing id> when countDir is set.
func New(flaw Flaw, ttl time.Duration, countDir string) *Server {
	return &Server{flaw: flaw, ttl: ttl, countDir: countDir, racy: map[scope]bool{}, keys: map[scope]*record{}, things: map[string]*thing{}, counts: map[string]int{}}
}

// Count is the results of ref, or the transitions of a thing.
func (s *Server) Count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[name]
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch s.flaw {
	case Hang:
		io.Copy(io.Discard, r.Body) // then a client that hangs up ends the request's context
		<-r.Context().Done()
		return
	case HTML:
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>Welcome</body></html>\n")
		return
	}
	actor, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if actor != "alice" && actor != "bob" {
		problem(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		problem(w, http.StatusBadRequest, "unreadable body")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method != http.MethodPost:
		problem(w, http.StatusMethodNotAllowed, "POST only")
	case len(parts) == 1 && parts[0] == "things":
		var in struct{ Ref string }
		if json.Unmarshal(body, &in) != nil {
			problem(w, http.StatusBadRequest, "want a JSON object")
			return
		}
		s.keyed(w, r, actor, body, func(ctx context.Context) answer { return s.create(actor, in.Ref) })
	case len(parts) == 3 && parts[0] == "things" && parts[2] == "close":
		s.mu.Lock()
		defer s.mu.Unlock()
		if t := s.things[parts[1]]; t != nil && t.actor == actor {
			t.state = "closed"
			writeJSON(w, http.StatusOK, map[string]string{"id": parts[1], "state": "closed"})
			return
		}
		problem(w, http.StatusNotFound, "no such thing")
	case len(parts) == 3 && parts[0] == "things" && parts[2] == "reopen":
		s.keyed(w, r, actor, append([]byte(r.URL.Path+" "), body...), func(ctx context.Context) answer { return s.reopen(actor, parts[1]) })
	default:
		problem(w, http.StatusNotFound, "no such route")
	}
}

// keyed runs work once per key, the way the flaw says, and answers.
func (s *Server) keyed(w http.ResponseWriter, r *http.Request, actor string, request []byte, work func(context.Context) answer) {
	if s.flaw == NoID {
		a := work(r.Context())
		writeJSON(w, http.StatusOK, map[string]bool{"ok": a.status < 300})
		return
	}
	values := r.Header.Values("Idempotency-Key")
	if len(values) == 0 && s.flaw == KeyOptional {
		a, _ := s.run(r, work)
		s.write(w, a, false)
		return
	}
	key, ok := s.parseKey(values)
	if !ok {
		problem(w, http.StatusBadRequest, "send one Idempotency-Key of 1 to 255 visible ASCII characters")
		return
	}
	sc := scope{actor, key}
	if s.flaw == GlobalLeak || s.flaw == GlobalRefuse {
		sc.actor = ""
	}
	fp := sha256.Sum256(request)

	s.mu.Lock()
	rec := s.keys[sc]
	if rec != nil && rec.done && time.Now().After(rec.expires) && s.flaw != NeverExpires {
		delete(s.keys, sc) // an expired key is a new intent
		rec = nil
	}
	if _, seen := s.racy[sc]; !seen && s.flaw == RareStorm {
		s.racy[sc] = rand.IntN(6) == 0
	}
	switch {
	case rec == nil:
		if s.flaw != StormDuplicates && !s.racy[sc] {
			s.keys[sc] = &record{actor: actor, fingerprint: fp} // the claim
		}
		s.mu.Unlock()
		a, cut := s.run(r, work)
		s.mu.Lock()
		switch {
		case (a.status == 0 && s.flaw == DiesWithClient) || (s.flaw == LostResult && cut >= 0):
			// the key stays claimed, and answers 409 from now on
		case a.status == 0 || (s.flaw == CommitThenRelease && cut >= 0) ||
			(s.flaw == HangUpWindow && cut >= s.WindowAt && cut < s.WindowAt+Window):
			delete(s.keys, sc) // the completion's write failed with its context: released
		case a.status >= 500 && s.flaw != StoresFailures:
			delete(s.keys, sc) // released: the same key may run again
		default:
			s.keys[sc] = &record{actor: actor, fingerprint: fp, done: true, answer: a, expires: time.Now().Add(s.ttl)}
		}
		s.mu.Unlock()
		s.write(w, a, false)
	case s.flaw == GlobalRefuse && rec.actor != actor:
		s.mu.Unlock()
		problem(w, http.StatusUnprocessableEntity, "this key was used by another client")
	case rec.fingerprint != fp && s.flaw != NoFingerprint:
		s.mu.Unlock()
		if s.flaw == MismatchAs409 {
			problem(w, http.StatusConflict, "the key was used with another request")
			return
		}
		problem(w, http.StatusUnprocessableEntity, "the key was used with another request")
	case !rec.done:
		s.mu.Unlock()
		switch s.flaw {
		case LongRetryAfter:
			w.Header().Set("Retry-After", "2")
		case NoRetryAfter:
		default:
			w.Header().Set("Retry-After", "1")
		}
		problem(w, http.StatusConflict, "a request with this key is in progress")
	default:
		a := rec.answer
		s.mu.Unlock()
		if s.flaw == Rerender && a.id != "" {
			a.body = render(a.id, a.ref, "")
		}
		s.write(w, a, true)
	}
}

// run does the work after its length; status 0 is no work done (the
// client was gone first). cut is when the client hung up, from the work's
// start (0 if before it), or -1 if it did not before the work ended.
func (s *Server) run(r *http.Request, work func(context.Context) answer) (a answer, cut time.Duration) {
	ctx := context.WithoutCancel(r.Context()) // the work outlives its client
	if s.flaw == DiesWithClient || s.flaw == CommitThenRelease {
		ctx = r.Context()
	}
	start := time.Now()
	var hungUp atomic.Int64
	hungUp.Store(-1)
	noted := make(chan struct{})
	stop := context.AfterFunc(r.Context(), func() {
		hungUp.Store(int64(time.Since(start)))
		close(noted)
	})
	defer func() {
		if !stop() { // the client hung up: wait until that is noted
			<-noted
		}
		cut = time.Duration(hungUp.Load())
	}()
	if ctx.Err() != nil {
		return answer{}, 0 // a statement on a cancelled context never starts
	}
	length := Work
	if s.flaw == LongRetryAfter {
		length = LongWork
	}
	select {
	case <-time.After(length):
	case <-ctx.Done():
		if s.flaw == DiesWithClient {
			return answer{}, 0
		}
	}
	if r.Header.Get("Target-Fail") != "" {
		return answer{status: http.StatusServiceUnavailable, body: []byte(`{"title":"the work failed","status":503}`)}, 0
	}
	return work(ctx), 0 // CommitThenRelease: the work commits; only its completion sees the context
}

func (s *Server) create(actor, ref string) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made++
	id := "t-" + strconv.Itoa(s.made)
	s.things[id] = &thing{actor: actor, ref: ref, state: "open"}
	s.counted(ref)
	return answer{status: http.StatusCreated, body: render(id, ref, "open"), id: id, ref: ref}
}

func (s *Server) reopen(actor, id string) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.things[id]
	switch {
	case t == nil || t.actor != actor:
		return answer{status: http.StatusNotFound, body: []byte(`{"title":"no such thing","status":404}`)}
	case t.state != "closed":
		return answer{status: http.StatusUnprocessableEntity, body: []byte(`{"title":"the thing is not closed","status":422}`)}
	}
	t.state = "open"
	s.counted(id)
	return answer{status: http.StatusOK, body: render(id, t.ref, "open"), id: id, ref: t.ref}
}

// counted adds a result to name's count, and writes it for a --count-cmd.
// The caller holds s.mu.
func (s *Server) counted(name string) {
	s.counts[name]++
	if s.countDir != "" && name != "" && !strings.ContainsAny(name, `/\.`) {
		os.WriteFile(filepath.Join(s.countDir, name), []byte(strconv.Itoa(s.counts[name])), 0o644)
	}
}

func (s *Server) write(w http.ResponseWriter, a answer, replay bool) {
	if a.status == 0 {
		return // the client is gone
	}
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	switch {
	case a.status == http.StatusCreated && s.flaw == NoContent:
		w.WriteHeader(http.StatusNoContent)
		return
	case a.status == http.StatusCreated && s.flaw == EmptyCreated:
		w.Header().Set("Location", "/things/"+a.id)
		w.WriteHeader(http.StatusCreated)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if a.status >= 400 {
		w.Header().Set("Content-Type", "application/problem+json")
	}
	if a.status == http.StatusCreated {
		w.Header().Set("Location", "/things/"+a.id)
	}
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// render is a thing's answer, with the moment it was written.
func render(id, ref, state string) []byte {
	if state == "" {
		state = "open"
	}
	b, _ := json.Marshal(map[string]string{"id": id, "ref": ref, "state": state, "renderedAt": time.Now().Format(time.RFC3339Nano)})
	return b
}

// parseKey reads the key header's values: one value, quoted or bare, of
// 1 to 255 visible ASCII characters.
func (s *Server) parseKey(values []string) (string, bool) {
	if len(values) == 0 {
		return "", false
	}
	v := strings.TrimSpace(values[0])
	if s.flaw == AnyKey {
		return v, v != ""
	}
	if len(values) > 1 {
		return "", false
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"title":%q,"status":%d}`, title, status)
}
