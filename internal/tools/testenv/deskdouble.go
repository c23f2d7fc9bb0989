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

// DeskDouble is a stand-in for the external system the outbox delivers to:
// the submissions and cancels of the review desk's HTTP API, held in
// memory, with the desk's fault knobs. It records every call, so that the
// tests of the outbox and of the dispatcher need neither the stand-in desk
// (package provider, the full demo's) nor a second database.
//
// It keeps the desk's contract and wire format (its words are the desk's,
// listed in reviewdesk/wire.go: a rename of the example leaves them as they
// are), which a contract test
// compares with the stand-in desk's: a submission's body is decoded into the
// desk client's own type (reviewdesk.Submission), and one with an unknown
// field, without requestId or topic, not JSON or over 16 KiB is refused (400
// invalid_body, 413 body_too_large), as is a call without one
// Idempotency-Key of 1 to 255 characters (400 idempotency_key_invalid); a
// key is accepted once (201, then 200 with its first receipt), and with
// another payload is 422 key_payload_mismatch; a lookup answers 200 or 404;
// a cancel may come before its submission; a refusal is a problem+json
// with its code. One rule differs: the stand-in desk takes one cancel per
// submission (another key is 422 already_cancelled: it has no reopen), the
// double one per key, so that a service with a reopen can cancel one
// request twice.
type DeskDouble struct {
	URL    string
	Client *reviewdesk.Client
	srv    *httptest.Server

	mu          sync.Mutex
	faults      DeskFaults
	submissions map[string]deskSubmission // by the submission's key
	cancels     map[string]deskCancel     // by the cancel's key
	calls       map[string]int            // "POST /v1/submissions", "GET /v1/submissions/{key}", …
	invalid     int                       // calls refused for their key or body
}

type deskSubmission struct {
	receipt reviewdesk.Receipt
	body    reviewdesk.Submission
}

type deskCancel struct {
	receipt       reviewdesk.Receipt
	submissionKey string
}

// deskMaxBody bounds a request body, as the stand-in desk does.
const deskMaxBody = 16 << 10

// DeskFaults are the desk's fault knobs, as its PUT /v1/faults takes them
// (package provider's Faults), on submissions and cancels.
type DeskFaults struct {
	// FailNext answers the next N calls 503, doing nothing.
	FailNext int
	// HoldAnswer accepts every new call, then holds its answer this long.
	HoldAnswer string
	// DropResponses accepts the next N new calls, then closes the
	// connection without an answer.
	DropResponses int
	// Refuse answers every new call 422, accepting nothing; a key the desk
	// holds is answered as usual.
	Refuse bool
	// Down closes the connection of every call at once, doing nothing.
	Down bool
	// Only names the resources the knobs apply to, "submissions" or
	// "cancels"; empty means both.
	Only []string
	// Account aims the knobs at the calls made for this account only (the
	// Desk-Account header); empty means every call.
	Account string
}

func (f DeskFaults) appliesTo(resource, account string) bool {
	return (len(f.Only) == 0 || slices.Contains(f.Only, resource)) && (f.Account == "" || f.Account == account)
}

// StartDeskDouble serves a desk double over loopback until t ends.
func StartDeskDouble(t testing.TB) *DeskDouble {
	t.Helper()
	d := &DeskDouble{submissions: map[string]deskSubmission{}, cancels: map[string]deskCancel{}, calls: map[string]int{}}
	d.srv = ServeUntilTheEnd(t, http.HandlerFunc(d.serve))
	d.URL = d.srv.URL
	d.Client = reviewdesk.New(d.URL, nil)
	return d
}

// ServeUntilTheEnd serves h on a test server whose calls the test's end
// ends: an answer still held (a delay, a held answer) whose sender died
// may never notice, and Close would wait for it.
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
	if f.HoldAnswer != "" {
		if _, err := time.ParseDuration(f.HoldAnswer); err != nil {
			t.Fatalf("HoldAnswer: %v", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = f
}

// Submissions counts the submissions the double accepted.
func (d *DeskDouble) Submissions(t testing.TB) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.submissions)
}

// AllCancels counts the cancels the double accepted.
func (d *DeskDouble) AllCancels(t testing.TB) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cancels)
}

// Submission returns the receipt of the submission under key, and whether
// the double accepted one.
func (d *DeskDouble) Submission(key string) (reviewdesk.Receipt, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.submissions[key]
	return s.receipt, ok
}

// Submitted returns the body of the submission the double accepted under
// key, as it decoded it, and whether it accepted one.
func (d *DeskDouble) Submitted(key string) (reviewdesk.Submission, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.submissions[key]
	return s.body, ok
}

// Invalid counts the calls the double refused for their Idempotency-Key or
// their body (400, 413).
func (d *DeskDouble) Invalid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.invalid
}

// Cancels counts the cancels the double accepted under key for the
// submission under submissionKey.
func (d *DeskDouble) Cancels(key, submissionKey string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.cancels[key]; ok && c.submissionKey == submissionKey {
		return 1
	}
	return 0
}

// Calls is how many calls of route (such as "POST /v1/submissions" or
// "GET /v1/submissions/{key}") the double served.
func (d *DeskDouble) Calls(route string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[route]
}

func (d *DeskDouble) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	parts := strings.Split(path, "/")
	resource := parts[0]
	if resource == "submissions" && len(parts) == 3 && parts[2] == "cancel" {
		resource = "cancels"
	}
	d.mu.Lock()
	d.calls[r.Method+" "+DeskRoute(r.URL.Path)]++
	f := d.faults
	on := f.appliesTo(resource, r.Header.Get(reviewdesk.AccountHeader))
	fail := on && f.FailNext > 0
	if fail {
		d.faults.FailNext--
	}
	d.mu.Unlock()
	switch {
	case on && f.Down:
		dropConnection(w)
		return
	case fail:
		w.Header().Set("Retry-After", "1")
		writeDeskProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk failed this call (failNext)")
		return
	}
	switch {
	case r.Method == http.MethodPost && len(parts) == 1 && parts[0] == "submissions":
		key, ok := d.idempotencyKey(w, r)
		if !ok {
			return
		}
		body, ok := d.submission(w, r)
		if !ok {
			return
		}
		d.accept(w, r, resource, on, key, "", body)
	case r.Method == http.MethodPost && resource == "cancels":
		if key, ok := d.idempotencyKey(w, r); ok { // the desk reads no body of a cancel
			d.accept(w, r, resource, on, key, parts[1], reviewdesk.Submission{})
		}
	case r.Method == http.MethodGet && len(parts) == 2 && (parts[0] == "submissions" || parts[0] == "cancels"):
		d.lookup(w, parts[0], parts[1])
	default:
		writeDeskProblem(w, http.StatusNotFound, "not_found", "no such route")
	}
}

// idempotencyKey returns the call's Idempotency-Key, or refuses the call as
// the desk does and reports false.
func (d *DeskDouble) idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || len(r.Header.Values("Idempotency-Key")) > 1 {
		d.refuseInvalid(w, http.StatusBadRequest, "idempotency_key_invalid", "send one Idempotency-Key of 1 to 255 characters")
		return "", false
	}
	return key, true
}

// submission decodes a submission's body into the desk client's type, or
// refuses the call as the desk does and reports false: a body over the
// limit (as sent or as declared), not JSON, with a field the type lacks,
// or without requestId or topic.
func (d *DeskDouble) submission(w http.ResponseWriter, r *http.Request) (reviewdesk.Submission, bool) {
	var s reviewdesk.Submission
	if r.ContentLength > deskMaxBody {
		d.refuseInvalid(w, http.StatusRequestEntityTooLarge, "body_too_large", "the body must be at most 16384 bytes")
		return s, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, deskMaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&s)
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
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
	d.mu.Lock()
	d.invalid++
	d.mu.Unlock()
	writeDeskProblem(w, status, code, detail)
}

// accept takes a new submission of body (submissionKey empty) or a cancel
// of the submission under submissionKey, under key, applying the knobs that
// act on a new call.
func (d *DeskDouble) accept(w http.ResponseWriter, r *http.Request, resource string, on bool, key, submissionKey string, body reviewdesk.Submission) {
	d.mu.Lock()
	s, known := d.submissions[key]
	rc, mismatch := s.receipt, known && s.body != body
	if submissionKey != "" {
		var c deskCancel
		c, known = d.cancels[key]
		rc, mismatch = c.receipt, known && c.submissionKey != submissionKey
	}
	if !known && on && d.faults.Refuse {
		d.mu.Unlock()
		writeDeskProblem(w, http.StatusUnprocessableEntity, strings.TrimSuffix(resource, "s")+"_refused", "the review desk refuses new "+resource+" now")
		return
	}
	if mismatch {
		d.mu.Unlock()
		writeDeskProblem(w, http.StatusUnprocessableEntity, "key_payload_mismatch", "this key was used for another "+strings.TrimSuffix(resource, "s"))
		return
	}
	drop := !known && on && d.faults.DropResponses > 0
	if drop {
		d.faults.DropResponses--
	}
	hold, _ := time.ParseDuration(d.faults.HoldAnswer)
	if !known {
		rc = reviewdesk.Receipt{Key: key, Reference: uuid.NewString(), AcceptedAt: time.Now().UTC()}
		if submissionKey == "" {
			d.submissions[key] = deskSubmission{receipt: rc, body: body}
		} else {
			d.cancels[key] = deskCancel{receipt: rc, submissionKey: submissionKey}
		}
	}
	d.mu.Unlock()
	switch {
	case drop:
		dropConnection(w)
		return
	case !known && on && hold > 0:
		select {
		case <-r.Context().Done():
			return
		case <-time.After(hold):
		}
	}
	status := http.StatusCreated
	if known {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if submissionKey != "" {
		writeDeskJSON(w, status, cancelAnswer(rc, submissionKey))
		return
	}
	writeDeskJSON(w, status, rc)
}

// deskLookup is the desk's answer to a lookup of a submission or a cancel.
type deskLookup struct {
	reviewdesk.Receipt
	SubmissionKey   string `json:"submissionKey,omitempty"`   // of a cancel
	CancelReference string `json:"cancelReference,omitempty"` // of a cancelled submission
}

// cancelAnswer is the cancel rc of the submission under submissionKey, as
// the desk answers its POST and its lookup alike.
func cancelAnswer(rc reviewdesk.Receipt, submissionKey string) deskLookup {
	rc.State = "accepted"
	return deskLookup{Receipt: rc, SubmissionKey: submissionKey}
}

// lookup answers GET /v1/submissions/{key} and GET /v1/cancels/{key}.
func (d *DeskDouble) lookup(w http.ResponseWriter, resource, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var answer deskLookup
	var ok bool
	if resource == "submissions" {
		var s deskSubmission
		s, ok = d.submissions[key]
		answer.Receipt = s.receipt
		answer.State = "accepted"
		var last time.Time // the last cancel's reference, of several
		for _, c := range d.cancels {
			if c.submissionKey == key && !c.receipt.AcceptedAt.Before(last) {
				answer.State, answer.CancelReference, last = "cancelled", c.receipt.Reference, c.receipt.AcceptedAt
			}
		}
	} else {
		var c deskCancel
		c, ok = d.cancels[key]
		answer = cancelAnswer(c.receipt, c.submissionKey)
	}
	if !ok {
		writeDeskJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		return
	}
	writeDeskJSON(w, http.StatusOK, answer)
}

// DeskRoute is a desk path with its third segment, the key, written {key}.
func DeskRoute(path string) string {
	parts := strings.SplitN(path, "/", 5) // "", "v1", resource, key, rest
	if len(parts) > 3 && parts[1] == "v1" {
		parts[3] = "{key}"
	}
	return strings.Join(parts, "/")
}

func writeDeskJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeDeskProblem answers a refusal as the desk does: a problem+json with
// its code.
func writeDeskProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status,
		"code": code, "detail": detail})
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
