// Package provider is the review desk: a small separate service that the
// demo hands every accepted demo request to. It stands for "another system"
// in the lesson that a local table cannot make a call to another system
// happen exactly once. It deduplicates by its own Idempotency-Key, keeps its
// submissions in its own PostgreSQL database, and has fault knobs so that a
// workshop or a test can make the call slow, failing, lost or refused.
//
// It also holds the resources of an operation of several steps, an
// expedite: an express slot held for an account, a charge of the account's
// credit that uses the slot, and the two compensations, the release of a
// slot and the refund of a charge. The desk decides that a charge debits
// once, only while its slot is held, and never below zero; that a slot
// nobody charged is released when its hold ends; and that a compensation
// which arrives before what it undoes is kept and undoes it from the start.
//
//	POST /v1/submissions       Idempotency-Key + {"requestId","topic","note"}: 201 the first time,
//	                           200 + Idempotent-Replayed for the same key again, 422 for the key
//	                           with another payload
//	GET  /v1/submissions/{key} 200 {"state":"accepted"|"cancelled",…} or 404 {"state":"unknown"}
//	POST /v1/submissions/{key}/cancel
//	                           Idempotency-Key (the cancel's own): 201 the first time, 200 +
//	                           Idempotent-Replayed again, 422 for the key with another
//	                           submission or another key for the same one. A cancel may come
//	                           before its submission: it is kept, and cancels it from the start
//	GET  /v1/cancels/{key}     200 {"state":"accepted",…} or 404 {"state":"unknown"}
//	POST /v1/slots             Idempotency-Key + {"requestId","account"}: 201 a slot held until
//	                           holdUntil (accepted + Options.SlotHold), 200 + Idempotent-Replayed
//	                           again (its current state), 422 key_payload_mismatch
//	GET  /v1/slots/{key}       200 {"state":"held"|"charged"|"released","holdUntil",
//	                           "releasedBy":"release"|"hold_expired",…} or 404 {"state":"unknown"}
//	POST /v1/slots/{key}/release
//	                           Idempotency-Key (the release's own): as a cancel, with
//	                           already_released for another key of the same slot, and
//	                           slot_charged for a slot that was charged
//	GET  /v1/releases/{key}    200 {"state":"accepted","slotKey",…} or 404 {"state":"unknown"}
//	POST /v1/charges           Idempotency-Key + {"requestId","account","amount","slotKey"}: 201
//	                           the account debited and the slot charged in one transaction,
//	                           200 + Idempotent-Replayed again; 422 slot_not_held,
//	                           insufficient_credit or key_payload_mismatch, storing nothing
//	GET  /v1/charges/{key}     200 {"state":"charged"|"refunded",…} or 404 {"state":"unknown"}
//	POST /v1/charges/{key}/refund
//	                           Idempotency-Key (the refund's own): as a cancel, with
//	                           already_refunded for another key of the same charge; the amount
//	                           goes back once, and a charge that comes after its refund is
//	                           refunded from the start
//	GET  /v1/refunds/{key}     200 {"state":"accepted","chargeKey",…} or 404 {"state":"unknown"}
//	GET  /v1/stats             counts of every resource and each account's credit
//	GET|PUT /v1/faults         the fault knobs, when enabled: the desk's, or with "account" one
//	                           account's, for the calls made for it (GET ?account=: those that
//	                           apply to its calls)
//	GET  /readyz               200 while its database answers
//
// A slot held past its hold is released by SweepHolds, which the provider
// command runs every second; a charge that comes after the hold ends is
// refused whether or not the sweep has run.
package provider

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// Submission is what a sender submits.
type Submission struct {
	RequestID string `json:"requestId"`
	Topic     string `json:"topic"`
	Note      string `json:"note"`
}

// The desk's resources, as Faults.Only names them. A status lookup of a
// resource is that resource's call.
const (
	resSubmissions = "submissions"
	resCancels     = "cancels"
	resSlots       = "slots"
	resReleases    = "releases"
	resCharges     = "charges"
	resRefunds     = "refunds"
)

// refusedCodes are the codes of the refuse knob's answer, by resource.
var refusedCodes = map[string]string{
	resSubmissions: "submission_refused",
	resCancels:     "cancel_refused",
	resSlots:       "slot_refused",
	resReleases:    "release_refused",
	resCharges:     "charge_refused",
	resRefunds:     "refund_refused",
}

// AccountHeader names the account a call is made for
// (reviewdesk.WithAccount). The desk aims an account's faults at the calls
// that carry it (Faults.Account); a call without it meets the desk's own
// faults only.
const AccountHeader = reviewdesk.AccountHeader

// maxAccountFaults bounds how many accounts hold faults of their own at
// once, a workshop room's worth.
const maxAccountFaults = 1000

// Faults are the knobs of the desk. The zero value is a healthy desk. Each
// knob applies to every resource (submissions, cancels, slots, releases,
// charges, refunds) as it does to submissions, or only to those Only names.
//
// Without Account they are the desk's own, for every call. With Account
// they are that account's, for the calls made for it (AccountHeader): set
// and cleared apart from the desk's and from every other account's; while
// an account holds faults of its own, the desk's do not apply to its calls.
type Faults struct {
	// Account aims the knobs at the calls made for this account only (1 to
	// 64 characters); empty: the desk's own. Knobs all zero for an account
	// clear its faults, and its calls meet the desk's own again.
	Account string `json:"account,omitempty"`
	// Delay holds every call, a new one or a status lookup, this long
	// first, e.g. "2s".
	Delay string `json:"delay,omitempty"`
	// FailNext answers the next N calls 503, doing nothing.
	FailNext int `json:"failNext,omitempty"`
	// HoldAnswer stores every new submission (slot, charge, …), then holds
	// its answer this long, e.g. "30s": the sender's crash window between
	// the desk's accept and its own record of it.
	HoldAnswer string `json:"holdAnswer,omitempty"`
	// DropResponses stores the next N new submissions (slots, charges, …),
	// then closes the connection without an answer: the sender cannot know
	// it was accepted.
	DropResponses int `json:"dropResponses,omitempty"`
	// Refuse answers every new submission 422 submission_refused (a new
	// slot slot_refused, a new charge charge_refused, …), a definite
	// refusal, and stores nothing. A key the desk holds is answered as
	// usual.
	Refuse bool `json:"refuse,omitempty"`
	// Down closes the connection of every call at once, doing nothing, as
	// if the desk were gone. /v1/faults, /v1/stats and /readyz still
	// answer, so it can be switched back and looked at.
	Down bool `json:"down,omitempty"`
	// Only names the resources the knobs apply to, among submissions,
	// cancels, slots, releases, charges and refunds; empty means all.
	Only []string `json:"only,omitempty"`
}

// appliesTo reports whether the knobs act on calls to resource.
func (f Faults) appliesTo(resource string) bool {
	return len(f.Only) == 0 || slices.Contains(f.Only, resource)
}

// Options are the desk's settings. DefaultOptions are those of the provider
// command; NewServer refuses a SlotHold or Credit out of range.
type Options struct {
	// Faults allows PUT /v1/faults; without it the desk is always healthy.
	Faults bool
	// SlotHold is how long a new slot is held for its charge: more than 0,
	// up to MaxSlotHold.
	SlotHold time.Duration
	// Credit is the credit an account starts with, on its first charge: 0
	// to MaxCredit.
	Credit int
}

// The bounds of Options.
const (
	MaxSlotHold = 24 * time.Hour
	MaxCredit   = 1_000_000_000
)

// DefaultOptions are the provider command's defaults, with the faults off.
func DefaultOptions() Options { return Options{SlotHold: 2 * time.Minute, Credit: 1000} }

// check names the option out of range, if any.
func (o Options) check() error {
	if o.SlotHold <= 0 || o.SlotHold > MaxSlotHold {
		return fmt.Errorf("the slot hold must be more than 0 and up to %s, not %s", MaxSlotHold, o.SlotHold)
	}
	if o.Credit < 0 || o.Credit > MaxCredit {
		return fmt.Errorf("the credit must be 0 to %d, not %d", MaxCredit, o.Credit)
	}
	return nil
}

// maxBody bounds a request body.
const maxBody = 16 << 10

// Server is the review desk's HTTP handler.
type Server struct {
	store  *store
	logger *slog.Logger
	opts   Options

	mu       sync.Mutex
	faults   knobs             // the desk's own
	accounts map[string]*knobs // each account's own, by Faults.Account
}

// knobs are one set of faults with its durations parsed.
type knobs struct {
	f           Faults
	delay, hold time.Duration
}

// knobsFor returns the faults that apply to the calls made for account:
// its own if it holds some, else the desk's. The caller holds s.mu.
func (s *Server) knobsFor(account string) *knobs {
	if k, ok := s.accounts[account]; ok && account != "" {
		return k
	}
	return &s.faults
}

// NewServer returns the desk on db, which Migrate has prepared. Its held
// slots are released at the end of their hold only while SweepHolds runs.
func NewServer(db *sqlx.DB, logger *slog.Logger, opts Options) (*Server, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("review desk: %w", err)
	}
	st, err := newStore(db)
	if err != nil {
		return nil, err
	}
	return &Server{store: st, logger: logger, opts: opts, accounts: map[string]*knobs{}}, nil
}

// Handler returns the desk's routes.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.logRequests, refuseDeclaredOversize)
	// Each route of a resource is that resource's, for the fault knobs.
	of := func(resource string) chi.Router { return r.With(s.applyFaults(resource)) }
	submit, slot, charge := s.newCalls()
	of(resSubmissions).Post("/v1/submissions", handleNewCall(s, submit))
	of(resSubmissions).Get("/v1/submissions/{key}", s.handleStatus)
	cancel, release, refund := s.followUps()
	of(resCancels).Post("/v1/submissions/{key}/cancel", s.handleFollowUp(cancel))
	of(resCancels).Get("/v1/cancels/{key}", s.handleFollowUpStatus(cancel))
	of(resSlots).Post("/v1/slots", handleNewCall(s, slot))
	of(resSlots).Get("/v1/slots/{key}", handleLookup(s, slot.lookup))
	of(resReleases).Post("/v1/slots/{key}/release", s.handleFollowUp(release))
	of(resReleases).Get("/v1/releases/{key}", s.handleFollowUpStatus(release))
	of(resCharges).Post("/v1/charges", handleNewCall(s, charge))
	of(resCharges).Get("/v1/charges/{key}", handleLookup(s, charge.lookup))
	of(resRefunds).Post("/v1/charges/{key}/refund", s.handleFollowUp(refund))
	of(resRefunds).Get("/v1/refunds/{key}", s.handleFollowUpStatus(refund))
	r.Get("/v1/stats", s.handleStats)
	r.Get("/readyz", s.handleReadyz)
	r.Get("/v1/faults", s.handleGetFaults)
	r.Put("/v1/faults", s.handlePutFaults)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "not_found", "no such route")
	})
	return r
}

// idempotencyKey returns the request's Idempotency-Key, or answers 400 and
// reports false.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || len(r.Header.Values("Idempotency-Key")) > 1 {
		writeProblem(w, http.StatusBadRequest, "idempotency_key_invalid", "send one Idempotency-Key of 1 to 255 characters")
		return "", false
	}
	return key, true
}

// errBodyTooLarge is the error of a body over maxBody, as sent or as declared.
var errBodyTooLarge = fmt.Errorf("the body must be at most %d bytes", maxBody)

// refuseDeclaredOversize answers 413 a request that declares a body over maxBody,
// before its key or faults, and closes the connection: without it, Go's server
// would read the body it does not need (up to 256 KiB) before it sends the answer.
func refuseDeclaredOversize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			w.Header().Set("Connection", "close")
			writeBodyError(w, errBodyTooLarge, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decodeBody reads the request's JSON body into v, refusing unknown fields;
// one declared over maxBody is refused before (refuseDeclaredOversize).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		return errBodyTooLarge
	}
	return err
}

// writeBodyError answers a body decodeBody refused: 413 body_too_large
// when it is over the limit, else 400 invalid_body with usage.
func writeBodyError(w http.ResponseWriter, err error, usage string) {
	if errors.Is(err, errBodyTooLarge) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "body_too_large", err.Error())
		return
	}
	writeProblem(w, http.StatusBadRequest, "invalid_body", usage)
}

// refused answers a new call to resource 422 while the refuse knob is on
// for it, and reports whether it did. known tells whether the desk holds
// the call's key already: a repeat of what it took is answered as usual.
func (s *Server) refused(w http.ResponseWriter, r *http.Request, resource string, known func(context.Context) (bool, error)) bool {
	if f := s.current(r.Header.Get(AccountHeader)); !f.Refuse || !f.appliesTo(resource) {
		return false
	}
	switch ok, err := known(r.Context()); {
	case err != nil:
		s.fail(w, r, err)
		return true
	case ok:
		return false
	}
	writeProblem(w, http.StatusUnprocessableEntity, refusedCodes[resource], "the review desk refuses new "+resource+" now")
	return true
}

// answer writes v, what the desk stored under a call's key, applying
// dropResponses and holdAnswer to a new one of resource.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, resource string, v any, fresh bool) {
	account := r.Header.Get(AccountHeader)
	if fresh && s.takeDrop(resource, account) {
		dropConnection(w)
		return
	}
	s.mu.Lock()
	k := s.knobsFor(account)
	hold := k.hold
	if !k.f.appliesTo(resource) {
		hold = 0
	}
	s.mu.Unlock()
	if fresh && hold > 0 {
		// The server notices a sender that leaves only once the body is
		// read: a cancel's, a release's or a refund's is not.
		io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxBody))
		if !pause(r.Context(), hold) {
			return
		}
	}
	status := http.StatusCreated
	if !fresh {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, v)
}

// handleStatus is GET /v1/submissions/{key}.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "key")
	rc, ok, err := s.store.lookup(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"key": key, "state": "unknown"})
		return
	}
	answer := struct {
		Receipt
		State           string `json:"state"`
		CancelReference string `json:"cancelReference,omitempty"`
	}{Receipt: rc, State: "accepted"}
	if c, cancelled, err := s.store.cancelOf(r.Context(), key); err != nil {
		s.fail(w, r, err)
		return
	} else if cancelled {
		answer.State, answer.CancelReference = "cancelled", c.Reference
	}
	writeJSON(w, http.StatusOK, answer)
}

// handleReadyz answers 200 while the desk's database answers.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.db.PingContext(ctx); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk's database does not answer")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleGetFaults(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Faults {
		writeProblem(w, http.StatusForbidden, "faults_disabled", "start the review desk with PROVIDER_FAULTS=true to use its fault knobs")
		return
	}
	writeJSON(w, http.StatusOK, s.current(r.URL.Query().Get("account")))
}

// handlePutFaults replaces the whole set of faults; {} clears them.
func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Faults {
		writeProblem(w, http.StatusForbidden, "faults_disabled", "start the review desk with PROVIDER_FAULTS=true to use its fault knobs")
		return
	}
	var f Faults
	if err := decodeBody(w, r, &f); err != nil {
		writeBodyError(w, err, "send the faults as JSON: delay, holdAnswer, failNext, dropResponses, refuse, down, only, account")
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeProblem(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	s.logger.Info("faults set", "faults", f)
	writeJSON(w, http.StatusOK, f)
}

// SetFaults replaces the desk's faults, or with f.Account that account's.
func (s *Server) SetFaults(f Faults) error {
	var d [2]time.Duration
	for i, v := range []string{f.Delay, f.HoldAnswer} {
		var err error
		if d[i], err = time.ParseDuration(cmp.Or(v, "0s")); err != nil || d[i] < 0 || d[i] > time.Minute {
			return fmt.Errorf("delay and holdAnswer must be durations up to 1m, such as 2s")
		}
	}
	if f.FailNext < 0 || f.DropResponses < 0 {
		return fmt.Errorf("failNext and dropResponses must not be negative")
	}
	for _, res := range f.Only {
		if _, ok := refusedCodes[res]; !ok {
			return fmt.Errorf("only names resources among %s, not %q", strings.Join(resourceNames(), ", "), res)
		}
	}
	if len(f.Account) > 64 {
		return fmt.Errorf("account must be at most 64 characters")
	}
	f.Only = slices.Clone(f.Only)
	k := knobs{f: f, delay: d[0], hold: d[1]}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch _, held := s.accounts[f.Account]; {
	case f.Account == "":
		s.faults = k
	case f.isClear():
		delete(s.accounts, f.Account)
	case !held && len(s.accounts) >= maxAccountFaults:
		return fmt.Errorf("%d accounts hold faults already: clear some first", maxAccountFaults)
	default:
		s.accounts[f.Account] = &k
	}
	return nil
}

// isClear reports whether f sets no knob.
func (f Faults) isClear() bool {
	return f.Delay == "" && f.FailNext == 0 && f.HoldAnswer == "" && f.DropResponses == 0 && !f.Refuse && !f.Down
}

// current returns the faults that apply to the calls made for account:
// its own, or the desk's when it holds none (and for "").
func (s *Server) current(account string) Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knobsFor(account).f
}

// resourceNames are the names Faults.Only takes, in the order of the routes.
func resourceNames() []string {
	return []string{resSubmissions, resCancels, resSlots, resReleases, resCharges, resRefunds}
}

// takeDrop reports whether the answer of this new call to resource, made
// for account, is to be dropped, counting it.
func (s *Server) takeDrop(resource, account string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.knobsFor(account); k.f.DropResponses > 0 && k.f.appliesTo(resource) {
		k.f.DropResponses--
		return true
	}
	return false
}

// applyFaults applies down, delay and failNext to the routes of resource.
func (s *Server) applyFaults(resource string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			k := s.knobsFor(r.Header.Get(AccountHeader))
			f, delay := k.f, k.delay
			on := f.appliesTo(resource)
			fail := on && f.FailNext > 0
			if fail {
				k.f.FailNext--
			}
			s.mu.Unlock()
			if !on {
				next.ServeHTTP(w, r)
				return
			}
			if f.Down {
				dropConnection(w)
				return
			}
			if delay > 0 && !pause(r.Context(), delay) {
				return
			}
			if fail {
				w.Header().Set("Retry-After", "1")
				writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk failed this call (failNext)")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.logger.ErrorContext(r.Context(), "review desk", "err", err, "request_id", middleware.GetReqID(r.Context()))
	writeProblem(w, http.StatusServiceUnavailable, "unavailable", "the review desk could not store or read this call")
}

// logRequests logs one line per request: no bodies, no keys.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		s.logger.Info("request", "request_id", middleware.GetReqID(r.Context()), "method", r.Method,
			"route", chi.RouteContext(r.Context()).RoutePattern(), "status", ww.Status(), "duration", time.Since(start))
	})
}

// fingerprint is the hex SHA-256 of a call's canonical JSON (its struct's
// fields in order).
func fingerprint(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// pause waits for d, and reports false if the client left first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.Copy(w, &b)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

// String formats the faults for logs.
func (f Faults) String() string {
	return fmt.Sprintf("delay=%s holdAnswer=%s failNext=%d dropResponses=%d refuse=%t down=%t only=%s account=%s",
		cmp.Or(f.Delay, "0s"), cmp.Or(f.HoldAnswer, "0s"), f.FailNext, f.DropResponses, f.Refuse, f.Down,
		cmp.Or(strings.Join(f.Only, ","), "all"), cmp.Or(f.Account, "all"))
}
