// Package idempotency decides what a request carrying an Idempotency-Key
// does: run the work once and store its answer, replay it, say the first
// attempt still runs (or wait for it), or refuse a key reused for another
// payload. It knows neither HTTP nor SQL: a Store keeps the records.
package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/apperr"
)

// Scope names one key: keys of different actors or operations never meet.
type Scope struct {
	Actor     string
	Operation string // e.g. "demo-requests.create"
	Key       string
}

// Response is an answer, stored and replayed byte for byte.
type Response struct {
	Status   int
	Header   map[string]string // the headers worth replaying (Location, Content-Type)
	Body     []byte
	ResultID string // id of what the work created or changed, if anything
}

// Effect is a business change the store commits with the key; its type is the store's own.
type Effect interface {
	Describe() string // names the change for errors, e.g. "insert demo request"
}

// Answer is what a work decided: the response, and the change (nil for none, as a refusal).
type Answer struct {
	Response Response
	Effect   Effect
}

// Claim is a request's hold on its key. Token is new for every statement
// that writes the key: a finish fenced by it commits only while this
// request still holds the key, so an owner that lost its lease to another
// attempt can never write over that attempt's answer.
type Claim struct {
	Scope Scope
	Token string
}

// KeyWrite is what a statement that writes or reads a key found: Prev is
// the row before it (nil for none), Now the store's clock.
type KeyWrite struct {
	Wrote bool
	Prev  *Record
	Now   time.Time
}

var (
	// ErrLeaseLost: another request took the key over; nothing was committed.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrEffectNotApplied: the business row changed since the work read it;
	// nothing was committed, and a retry decides afresh.
	ErrEffectNotApplied error = &apperr.Error{Code: apperr.Unavailable,
		Message: "the resource changed while this request was decided; send it again", RetryAfter: time.Second}
)

// Store keeps the records on the database clock. Each write is one statement
// that takes the key only where Decide says a request may (nothing stored, an
// expired answer, a lease passed), and otherwise returns the row that stopped it.
type Store interface {
	// Claim writes c's key in progress, committed before it returns, so that
	// a concurrent retry sees it held.
	Claim(ctx context.Context, c Claim, fp string, lease, ttl time.Duration) (KeyWrite, error)
	// CompleteAtomically writes c's key completed with a's response and,
	// FROM it, a's effect, in one statement. Errors: ErrEffectNotApplied.
	CompleteAtomically(ctx context.Context, c Claim, fp string, ttl time.Duration, a Answer) (KeyWrite, error)
	// FinishClaimAtomically commits a's effect and completes c's record in
	// one transaction while c's token holds it. Errors: ErrLeaseLost, ErrEffectNotApplied.
	FinishClaimAtomically(ctx context.Context, c Claim, a Answer) error
	// Release deletes c's record while it is in progress under c's token.
	// The Runner's store goes on trying in the background (retriedReleases).
	Release(ctx context.Context, c Claim) error
	// Lookup returns the record of a scope, nil if none, and the store's time.
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}

// Path says how an operation commits.
type Path string

const (
	OnePhase Path = "one_phase" // a database write decided beforehand: one statement
	TwoPhase Path = "two_phase" // a work outside the database, or with a workshop knob: claim, work, finish
)

// Outcome labels what a request did with its key, for logs and metrics.
type Outcome string

const (
	OutcomeCompleted        Outcome = "completed" // one phase: the key written with its answer
	OutcomeClaimed          Outcome = "claimed"   // two phase: the key written in progress
	OutcomeExpiredTakenOver Outcome = "expired_taken_over"
	OutcomeLeaseTakenOver   Outcome = "lease_taken_over"
	OutcomeReplayed         Outcome = "replayed"
	OutcomeInProgress       Outcome = "in_progress"
	OutcomeMismatch         Outcome = "mismatch"
	OutcomeReleased         Outcome = "released"   // the work or its finish failed; the claim was released
	OutcomeLeaseLost        Outcome = "lease_lost" // the finish found the claim taken over
	OutcomeFailed           Outcome = "failed"     // the work, or the statement that writes the key, failed
	OutcomeRerun            Outcome = "rerun"      // a row the statement's snapshot missed took the key
)

// Work decides an operation at time now, without writing: the Runner commits
// what it returns under the request's claim. Its errors are transient (the
// claim is released), except operation_in_progress: the work keeps its key.
// A refusal is an answer.
type Work func(ctx context.Context, now time.Time) (Answer, error)

// Request is one attempt at an operation.
type Request struct {
	Scope       Scope
	Fingerprint string
	Path        Path
	Retry       bool          // X-Client-Attempt ≥ 2: the Runner reads the key first
	Wait        time.Duration // Prefer: wait, for the layer Waits; Do does not wait
	TTL         time.Duration // how long this request's answer is replayed (0: Config.TTL)
}

// Result is the answer to a request.
type Result struct {
	Response Response
	Replayed bool
	Outcome  Outcome // set even when Do returns an error
	Path     Path
	WorkLeft time.Duration // in progress: until the owner's work must have ended (0: it has, or no one can say)
	Waited   bool          // the replay came after a wait for another attempt (Waits)
}

// Config configures a Runner. Store, TTL and Lease are required.
type Config struct {
	Store Store
	TTL   time.Duration // how long a completed record is replayed
	Lease time.Duration // how long a claim is owned before another may take it over
	// Clock is a work's time and waits' (default time.Now); leases use the store's.
	Clock   func() time.Time
	Observe func(operation string, p Path, o Outcome) // if set, told every outcome (for metrics)
}

// Runner is the state machine of one key around a Work.
type Runner struct {
	cfg Config
}

// NewRunner returns a Runner, or an error naming what cfg lacks.
func NewRunner(cfg Config) (*Runner, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("idempotency: a Runner needs a Store")
	case cfg.Lease <= 0:
		return nil, errors.New("idempotency: the lease must be positive")
	case cfg.TTL < cfg.Lease:
		return nil, errors.New("idempotency: the TTL must be at least the lease")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Observe == nil {
		cfg.Observe = func(string, Path, Outcome) {}
	}
	cfg.Store = retriedReleases{cfg.Store, cfg.Lease}
	return &Runner{cfg: cfg}, nil
}

// tries bounds the turns of one request, and a work's decisions.
const tries = 3

// Do runs work at most once for the request's key and fingerprint. Each turn
// runs one statement (a read of the key, or the path's write) and hands the
// row it found to Decide; each case of the switch answers, or takes one more
// turn. Errors: operation_in_progress, key_payload_mismatch; the store's or
// the work's.
func (r *Runner) Do(ctx context.Context, req Request, work Work) (Result, error) {
	read := req.Retry // a retry's key most likely exists: its first turn only reads it
	for turn := 1; ; turn++ {
		c := Claim{Scope: req.Scope, Token: uuid.NewString()}
		w, a, err := r.statement(ctx, req, c, work, read)
		if err != nil {
			return r.result(req, OutcomeFailed), err
		}
		switch d := Decide(w.Prev, req.Fingerprint, w.Now); {
		case d.Kind == Replay: // the stored answer, byte for byte; no work runs
			r.observe(req, OutcomeReplayed)
			return Result{Path: req.Path, Outcome: OutcomeReplayed, Response: w.Prev.Response, Replayed: true}, nil
		case d.Kind == Mismatch: // the key is another intent's: nothing runs, nothing changes
			return r.result(req, OutcomeMismatch), apperr.Errorf(apperr.KeyPayloadMismatch,
				"this idempotency key was already used with a different request payload")
		case d.Kind == InProgress: // another attempt holds the key: 409 until its work must have ended
			return r.inProgress(req, d)
		case w.Wrote && req.Path == OnePhase: // the answer and the business rows committed together
			return Result{Path: req.Path, Outcome: r.wrote(req, d.Kind), Response: a.Response}, nil
		case w.Wrote: // the key is held in progress by this request: run the work
			return r.run(ctx, req, c, r.wrote(req, d.Kind), work)
		case read: // nothing to replay: the next turn writes the key
			read = false
		case turn < tries: // a row committed after the statement's snapshot took the key: look again
			r.observe(req, OutcomeRerun)
		default: // the key changed under every turn: other writers race for it
			return r.result(req, OutcomeInProgress), InProgressError(time.Second)
		}
	}
}

// statement is a turn's one statement: a read of the key, or the path's write.
// A read that fails is taken as no key, and the write that follows decides;
// a database that does not answer is answered at once (503), as the write
// would only wait for it too.
func (r *Runner) statement(ctx context.Context, req Request, c Claim, work Work, read bool) (KeyWrite, Answer, error) {
	switch {
	case read:
		rec, now, err := r.cfg.Store.Lookup(ctx, req.Scope)
		if err != nil && apperr.Code(err) != apperr.Unavailable { // the write decides
			rec, err = nil, nil
		}
		return KeyWrite{Prev: rec, Now: now}, Answer{}, err
	case req.Path == OnePhase:
		return r.createResultAndFinishAtomically(ctx, req, c, work)
	default:
		w, err := r.claim(ctx, req, c)
		return w, Answer{}, err
	}
}

// createResultAndFinishAtomically is the one-phase path: the work decides in
// Go (the id, a refusal, the rendered answer), then one statement writes the
// key completed with that answer and, from it, the business rows, in one
// commit. There is no moment where the key is held without its answer, so no
// lease, no fence and no release: a concurrent duplicate waits on the unique
// index for the commit and replays. The client cannot cancel it once it
// starts. When the business row the work read changed before the write
// (ErrEffectNotApplied), nothing was committed and the work decides again.
func (r *Runner) createResultAndFinishAtomically(ctx context.Context, req Request, c Claim, work Work) (KeyWrite, Answer, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.workBudget())
	defer cancel()
	for try := 1; ; try++ {
		a, err := work(ctx, r.cfg.Clock())
		if err != nil {
			return KeyWrite{}, a, err
		}
		w, err := r.cfg.Store.CompleteAtomically(ctx, c, req.Fingerprint, cmp.Or(req.TTL, r.cfg.TTL), a)
		switch {
		case errors.Is(err, ErrEffectNotApplied) && try < tries:
			continue
		case err != nil && !errors.Is(err, ErrEffectNotApplied):
			err = fmt.Errorf("complete key: %w", err)
		}
		return w, a, err
	}
}

// claim is the two-phase path's statement: the key written in progress
// under a lease, so that a retry meanwhile sees it held, and a retry after
// the owner died (its lease passed) may take it over.
func (r *Runner) claim(ctx context.Context, req Request, c Claim) (KeyWrite, error) {
	w, err := r.cfg.Store.Claim(ctx, c, req.Fingerprint, r.cfg.Lease, cmp.Or(req.TTL, r.cfg.TTL))
	if err != nil {
		// It may have committed with its reply lost: release it by its token,
		// or the key would answer 409 for a whole lease.
		_ = r.cfg.Store.Release(ctx, c) // the claim's error is the answer
		return w, fmt.Errorf("claim key: %w", err)
	}
	return w, nil
}

// run is the two-phase path after its claim. The work runs on a context the
// client cannot cancel, bounded by half the lease, so it ends before anyone
// may take the key over. Its answer and effect commit in one transaction
// fenced by c's token: an owner whose lease passed finds the key taken
// (ErrLeaseLost) and commits nothing, so the business row never exists
// twice. On any other failure the claim is released and a retry runs at
// once.
func (r *Runner) run(ctx context.Context, req Request, c Claim, o Outcome, work Work) (Result, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.workBudget())
	defer cancel()
	a, err := work(wctx, r.cfg.Clock())
	if err == nil {
		err = r.cfg.Store.FinishClaimAtomically(wctx, c, a)
	}
	switch {
	case err == nil:
		return Result{Path: req.Path, Outcome: o, Response: a.Response}, nil
	case errors.Is(err, ErrLeaseLost): // the taker answers; this request's work is void
		return r.result(req, OutcomeLeaseLost), InProgressError(time.Second)
	case apperr.Code(err) == apperr.OperationInProgress:
		return r.result(req, OutcomeInProgress), err // the work keeps its key
	}
	res := r.result(req, OutcomeReleased)
	if rerr := r.cfg.Store.Release(ctx, c); rerr != nil {
		return res, errors.Join(err, fmt.Errorf("release claim (retried in the background): %w", rerr))
	}
	return res, err
}

// inProgress answers a request that met its key held by another attempt:
// 409 with Retry-After until the owner's work must have ended (the Waits
// layer may wait that long instead). A lease that runs far past any key's
// TTL is a key held for an operator: 409 with no time to promise.
func (r *Runner) inProgress(req Request, d Decision) (Result, error) {
	res := r.result(req, OutcomeInProgress)
	if d.LeaseLeft > 2*r.cfg.TTL {
		return res, InProgressError(0)
	}
	res.WorkLeft = d.WorkLeft
	return res, InProgressError(d.RetryAfter())
}

// wrote reports what a turn that wrote the key did, where Decide said kind.
func (r *Runner) wrote(req Request, kind Kind) Outcome {
	o := map[Kind]Outcome{ClaimNew: OutcomeClaimed, TakeOverExpired: OutcomeExpiredTakenOver, TakeOverLease: OutcomeLeaseTakenOver}[kind]
	if kind == ClaimNew && req.Path == OnePhase {
		o = OutcomeCompleted
	}
	r.observe(req, o)
	return o
}

// result is req's result with outcome o, which it reports.
func (r *Runner) result(req Request, o Outcome) Result {
	r.observe(req, o)
	return Result{Path: req.Path, Outcome: o}
}

func (r *Runner) observe(req Request, o Outcome) { r.cfg.Observe(req.Scope.Operation, req.Path, o) }

// workBudget is half the lease: a work ends well before its key may be taken over.
func (r *Runner) workBudget() time.Duration { return r.cfg.Lease / 2 }

// InProgressError is 409 operation_in_progress, retry after retryAfter (0: no one can say when).
func InProgressError(retryAfter time.Duration) error {
	if retryAfter == 0 {
		return &apperr.Error{Code: apperr.OperationInProgress, Message: "a request with this idempotency key is held, and no one can say until when"}
	}
	return &apperr.Error{Code: apperr.OperationInProgress, Message: "a request with this idempotency key is still being processed",
		RetryAfter: max(retryAfter, time.Second)}
}
