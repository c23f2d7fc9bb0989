package testkit

import (
	"context"
	"encoding/json"
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
// (package provider, the full demo's) nor a second database. It keeps the
// desk's contract: a key is accepted once (201, then 200 with its first
// receipt), a lookup answers 200 or 404, and a cancel may come before its
// submission.
type DeskDouble struct {
	URL    string
	Client *reviewdesk.Client
	srv    *httptest.Server

	mu          sync.Mutex
	faults      DeskFaults
	submissions map[string]reviewdesk.Receipt // by the submission's key
	cancels     map[string]deskCancel         // by the cancel's key
	calls       map[string]int                // "POST /v1/submissions", "GET /v1/submissions/{key}", …
}

type deskCancel struct {
	receipt       reviewdesk.Receipt
	submissionKey string
}

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
	d := &DeskDouble{submissions: map[string]reviewdesk.Receipt{}, cancels: map[string]deskCancel{}, calls: map[string]int{}}
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
	rc, ok := d.submissions[key]
	return rc, ok
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
		writeDeskJSON(w, http.StatusServiceUnavailable, map[string]string{"code": "unavailable"})
		return
	}
	switch {
	case r.Method == http.MethodPost && len(parts) == 1 && parts[0] == "submissions":
		d.accept(w, r, resource, on, r.Header.Get("Idempotency-Key"), "")
	case r.Method == http.MethodPost && resource == "cancels":
		d.accept(w, r, resource, on, r.Header.Get("Idempotency-Key"), parts[1])
	case r.Method == http.MethodGet && len(parts) == 2 && (parts[0] == "submissions" || parts[0] == "cancels"):
		d.lookup(w, parts[0], parts[1])
	default:
		writeDeskJSON(w, http.StatusNotFound, map[string]string{"code": "not_found"})
	}
}

// accept takes a new submission (submissionKey empty) or cancel under key,
// applying the knobs that act on a new call.
func (d *DeskDouble) accept(w http.ResponseWriter, r *http.Request, resource string, on bool, key, submissionKey string) {
	if key == "" {
		writeDeskJSON(w, http.StatusBadRequest, map[string]string{"code": "idempotency_key_invalid"})
		return
	}
	d.mu.Lock()
	rc, known := d.submissions[key]
	if submissionKey != "" {
		var c deskCancel
		c, known = d.cancels[key]
		rc = c.receipt
	}
	if !known && on && d.faults.Refuse {
		d.mu.Unlock()
		writeDeskJSON(w, http.StatusUnprocessableEntity, map[string]string{"code": strings.TrimSuffix(resource, "s") + "_refused"})
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
			d.submissions[key] = rc
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
	writeDeskJSON(w, status, rc)
}

// lookup answers GET /v1/submissions/{key} and GET /v1/cancels/{key}.
func (d *DeskDouble) lookup(w http.ResponseWriter, resource, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var rc reviewdesk.Receipt
	var ok bool
	if resource == "submissions" {
		rc, ok = d.submissions[key]
		rc.State = "accepted"
		for _, c := range d.cancels {
			if c.submissionKey == key {
				rc.State = "cancelled"
			}
		}
	} else {
		var c deskCancel
		c, ok = d.cancels[key]
		rc = c.receipt
		rc.State = "accepted"
	}
	if !ok {
		writeDeskJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		return
	}
	writeDeskJSON(w, http.StatusOK, rc)
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
