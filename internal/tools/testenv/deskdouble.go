package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// DeskDouble is the review desk (reviewdesk/wire.go) in memory, with fault
// knobs and a count of every call; cancels held by key, not by submission.
type DeskDouble struct {
	URL    string
	Client *reviewdesk.Client

	mu      sync.Mutex
	faults  DeskFaults
	held    map[string]map[string]deskEntry // by resource (reviewdesk.Submissions, Cancels), then key
	calls   map[string]int                  // by route, as DeskRoute writes it: "POST /v1/submissions", …
	invalid int                             // calls refused for their key or body
}

// deskEntry is a submission (body) or a cancel (of a submission's key).
type deskEntry struct {
	receipt reviewdesk.Receipt
	body    reviewdesk.Submission
	of      string
}

// DeskFaults are the desk's fault knobs (PUT /v1/faults of the stand-in).
type DeskFaults struct {
	FailNext      int      // answer the next N calls 503, doing nothing
	HoldAnswer    string   // accept every new call, then hold its answer this long
	DropResponses int      // accept the next N new calls, then close the connection unanswered
	Refuse        bool     // answer every new call 422; a key held is answered as usual
	Down          bool     // close every call's connection at once
	Only          []string // the resources the knobs apply to, reviewdesk.Submissions or Cancels; empty: both
	Account       string   // the account (Desk-Account header) they apply to; empty: all
}

// StartDeskDouble serves a desk double over loopback until t ends.
func StartDeskDouble(t testing.TB) *DeskDouble {
	t.Helper()
	d := &DeskDouble{held: map[string]map[string]deskEntry{reviewdesk.Submissions: {}, reviewdesk.Cancels: {}}, calls: map[string]int{}}
	d.URL = ServeUntilTheEnd(t, http.HandlerFunc(d.serve)).URL
	d.Client = reviewdesk.New(d.URL, nil)
	return d
}

// ServeUntilTheEnd serves h until the test ends, ending calls still held.
func ServeUntilTheEnd(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	ctx, cancel := context.WithCancel(context.Background())
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(func() { cancel(); srv.Close() })
	return srv
}

// Faults replaces the double's fault knobs with f.
func (d *DeskDouble) Faults(t testing.TB, f DeskFaults) {
	t.Helper()
	if _, err := time.ParseDuration(f.HoldAnswer); f.HoldAnswer != "" && err != nil {
		t.Fatalf("HoldAnswer: %v", err)
	}
	d.locked(func() { d.faults = f })
}

func (d *DeskDouble) locked(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// read is what f reads of d under its lock.
func read[T any](d *DeskDouble, f func() T) (v T) {
	d.locked(func() { v = f() })
	return v
}

// Submissions counts the submissions the double accepted.
func (d *DeskDouble) Submissions(testing.TB) int {
	return read(d, func() int { return len(d.held[reviewdesk.Submissions]) })
}

// AllCancels counts the cancels the double accepted.
func (d *DeskDouble) AllCancels(testing.TB) int {
	return read(d, func() int { return len(d.held[reviewdesk.Cancels]) })
}

// entry is what the double holds of resource under key.
func (d *DeskDouble) entry(resource, key string) (deskEntry, bool) {
	e := read(d, func() deskEntry { return d.held[resource][key] })
	return e, e.receipt.Key != ""
}

// Submission is the receipt and body of the submission under key, if accepted.
func (d *DeskDouble) Submission(key string) (reviewdesk.Receipt, reviewdesk.Submission, bool) {
	e, ok := d.entry(reviewdesk.Submissions, key)
	return e.receipt, e.body, ok
}

// Cancels counts the cancels under key of submissionKey's: 0 or 1.
func (d *DeskDouble) Cancels(key, submissionKey string) int {
	if c, ok := d.entry(reviewdesk.Cancels, key); ok && c.of == submissionKey {
		return 1
	}
	return 0
}

// Invalid counts the calls refused for their key or body (400, 413).
func (d *DeskDouble) Invalid() int { return read(d, func() int { return d.invalid }) }

// Calls counts the calls of a route, as DeskRoute writes it.
func (d *DeskDouble) Calls(route string) int { return read(d, func() int { return d.calls[route] }) }

// deskCall is the resource a call of method to path is about (none: no
// route of the desk's), whether it is a lookup, and the key it names: the
// key looked up, or the submission's that a cancel cancels.
func deskCall(method, path string) (resource string, lookup bool, named string) {
	cancelPrefix, cancelSuffix, _ := strings.Cut(reviewdesk.CancelPath, "%s")
	key := func(prefix, suffix string) (string, bool) {
		k, hasPrefix := strings.CutPrefix(path, prefix)
		k, hasSuffix := strings.CutSuffix(k, suffix)
		return k, hasPrefix && hasSuffix && k != "" && !strings.Contains(k, "/")
	}
	switch method {
	case http.MethodPost:
		if path == reviewdesk.SubmitPath {
			return reviewdesk.Submissions, false, ""
		}
		if k, ok := key(cancelPrefix, cancelSuffix); ok {
			return reviewdesk.Cancels, false, k
		}
	case http.MethodGet:
		if k, ok := key(reviewdesk.SubmissionStatusPath, ""); ok {
			return reviewdesk.Submissions, true, k
		}
		if k, ok := key(reviewdesk.CancelStatusPath, ""); ok {
			return reviewdesk.Cancels, true, k
		}
	}
	return "", false, ""
}

func (d *DeskDouble) serve(w http.ResponseWriter, r *http.Request) {
	resource, lookup, named := deskCall(r.Method, r.URL.Path)
	var on, fail, down bool
	d.locked(func() {
		d.calls[r.Method+" "+DeskRoute(r.URL.Path)]++
		f := d.faults
		on = (len(f.Only) == 0 || slices.Contains(f.Only, resource)) && (f.Account == "" || f.Account == r.Header.Get(reviewdesk.AccountHeader))
		if fail, down = on && f.FailNext > 0, on && f.Down; fail {
			d.faults.FailNext--
		}
	})
	key := r.Header.Get(reviewdesk.IdempotencyKeyHeader)
	switch {
	case down:
		panic(http.ErrAbortHandler) // the connection closes unanswered
	case fail:
		w.Header().Set("Retry-After", "1")
		writeDeskProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk failed this call (failNext)")
	case lookup:
		d.lookup(w, resource, named)
	case resource == "":
		writeDeskProblem(w, http.StatusNotFound, "not_found", "no such route")
	case key == "" || len(key) > 255 || len(r.Header.Values(reviewdesk.IdempotencyKeyHeader)) > 1:
		d.refuseInvalid(w, http.StatusBadRequest, "idempotency_key_invalid", "send one Idempotency-Key of 1 to 255 characters")
	case resource == reviewdesk.Cancels: // the desk reads no body of a cancel
		d.accept(w, r, resource, on, key, deskEntry{of: named})
	default:
		if body, ok := d.decode(w, r); ok {
			d.accept(w, r, resource, on, key, deskEntry{body: body})
		}
	}
}

// decode decodes a submission's body, or refuses it as the desk does.
func (d *DeskDouble) decode(w http.ResponseWriter, r *http.Request) (reviewdesk.Submission, bool) {
	const limit = 16 << 10
	var s reviewdesk.Submission
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(&s)
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge || r.ContentLength > limit {
		d.refuseInvalid(w, http.StatusRequestEntityTooLarge, "body_too_large", "the body must be at most 16384 bytes")
		return s, false
	}
	if err != nil || s.RequestID == "" || s.Topic == "" {
		d.refuseInvalid(w, http.StatusBadRequest, "invalid_body", `send {"requestId", "topic", "note"} as JSON, requestId and topic not empty`)
		return s, false
	}
	return s, true
}

func (d *DeskDouble) refuseInvalid(w http.ResponseWriter, status int, code, detail string) {
	d.locked(func() { d.invalid++ })
	writeDeskProblem(w, status, code, detail)
}

// accept takes a new submission or cancel, applying the knobs, or replays one.
func (d *DeskDouble) accept(w http.ResponseWriter, r *http.Request, resource string, on bool, key string, in deskEntry) {
	one := strings.TrimSuffix(resource, "s")
	d.mu.Lock()
	e, known := d.held[resource][key]
	if !known && on && d.faults.Refuse {
		d.mu.Unlock()
		writeDeskProblem(w, http.StatusUnprocessableEntity, one+"_refused", "the review desk refuses new "+resource+" now")
		return
	}
	if known && (e.body != in.body || e.of != in.of) {
		d.mu.Unlock()
		writeDeskProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for another "+one)
		return
	}
	drop := !known && on && d.faults.DropResponses > 0
	if drop {
		d.faults.DropResponses--
	}
	hold, _ := time.ParseDuration(d.faults.HoldAnswer)
	if !known {
		e = in
		e.receipt = reviewdesk.Receipt{Key: key, Reference: uuid.NewString(), AcceptedAt: time.Now().UTC()}
		d.held[resource][key] = e
	}
	d.mu.Unlock()
	if drop {
		panic(http.ErrAbortHandler)
	}
	if !known && on && hold > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(hold):
		}
	}
	status := http.StatusCreated
	if known {
		status = http.StatusOK
		w.Header().Set(reviewdesk.ReplayedHeader, "true")
	}
	var answer any = e.receipt
	if resource == reviewdesk.Cancels {
		answer = cancelAnswer(e)
	}
	writeDesk(w, status, "application/json", answer)
}

// cancelAnswer is a cancel as the desk answers its POST and its lookup.
func cancelAnswer(c deskEntry) reviewdesk.Lookup {
	c.receipt.State = "accepted"
	return reviewdesk.Lookup{Receipt: c.receipt, SubmissionKey: c.of}
}

// lookup answers a lookup of resource's key.
func (d *DeskDouble) lookup(w http.ResponseWriter, resource, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.held[resource][key]
	if !ok {
		writeDesk(w, http.StatusNotFound, "application/json", map[string]string{"key": key, "state": "unknown"})
		return
	}
	if resource == reviewdesk.Cancels {
		writeDesk(w, http.StatusOK, "application/json", cancelAnswer(e))
		return
	}
	answer := reviewdesk.Lookup{Receipt: e.receipt}
	answer.State = "accepted"
	var last time.Time
	for _, c := range d.held[reviewdesk.Cancels] {
		if c.of == key && !c.receipt.AcceptedAt.Before(last) {
			answer.State, answer.CancelReference, last = "cancelled", c.receipt.Reference, c.receipt.AcceptedAt
		}
	}
	writeDesk(w, http.StatusOK, "application/json", answer)
}

// DeskRoute is a desk path with its third segment, the key, written {key}.
func DeskRoute(path string) string {
	parts := strings.SplitN(path, "/", 5) // "", "v1", resource, key, rest
	if len(parts) > 3 && parts[1] == "v1" {
		parts[3] = "{key}"
	}
	return strings.Join(parts, "/")
}

func writeDesk(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeDeskProblem answers a refusal as the desk does.
func writeDeskProblem(w http.ResponseWriter, status int, code, detail string) {
	writeDesk(w, status, "application/problem+json", map[string]any{"type": "about:blank",
		"title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}
