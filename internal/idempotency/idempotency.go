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
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

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

// Claim is a request's hold on its key; it completes only while Token holds the key.
type Claim struct {
	Scope Scope
	Token string
}

// KeyWrite is what a statement that writes a key found.
type KeyWrite struct {
	Wrote bool
	Prev  *Record // the row before the statement, nil for none
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

// Store keeps the records on the database clock. Each write takes the key where Decide
// says a request may, in one statement, else returns the record that stopped it.
type Store interface {
	// Claim writes c's key in progress, committed before it returns.
	Claim(ctx context.Context, c Claim, fp string, lease, ttl time.Duration) (KeyWrite, error)
	// CompleteAtomically writes c's key completed with a's response and,
	// FROM it, a's effect, in one statement. Errors: ErrEffectNotApplied.
	CompleteAtomically(ctx context.Context, c Claim, fp string, ttl time.Duration, a Answer) (KeyWrite, error)
	// FinishClaimAtomically commits a's effect and completes c's record in
	// one transaction while c's token holds it. Errors: ErrLeaseLost, ErrEffectNotApplied.
	FinishClaimAtomically(ctx context.Context, c Claim, a Answer) error
	// Release deletes c's record while it is in progress under c's token.
	Release(ctx context.Context, c Claim) error
	// Lookup returns the record of a scope, nil if none, and the store's time.
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}

// Path says how an operation commits.
type Path string

const (
	OnePhase Path = "one_phase" // a database write decided beforehand (completeAtomically)
	TwoPhase Path = "two_phase" // a work outside the database, or with a workshop knob (claim, run)
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
	OutcomeReleased         Outcome = "released"     // the work or its finish failed; the claim was released
	OutcomeLeaseLost        Outcome = "lease_lost"   // the finish found the claim taken over
	OutcomeFailed           Outcome = "failed"       // the work, or the statement that writes the key, failed
	OutcomeRerun            Outcome = "rerun"        // a row the statement's snapshot missed took the key
	OutcomeRateLimited      Outcome = "rate_limited" // refused under the bound on new keys
)

// Work decides an operation at time now, without writing: the Runner commits
// what it returns under c. Its errors are transient (the claim is released),
// except operation_in_progress: the work keeps its key. A refusal is an answer.
type Work func(ctx context.Context, c Claim, now time.Time) (Answer, error)

// Request is one attempt at an operation.
type Request struct {
	Scope       Scope
	Fingerprint string
	Path        Path
	Wait        time.Duration // how long to wait for a first attempt in progress (Prefer: wait), at most maxWait
	Retry       bool          // X-Client-Attempt ≥ 2: the Runner reads the key first
	TTL         time.Duration // how long this request's answer is replayed (0: Config.TTL)
}

// Result is the answer to a request.
type Result struct {
	Response Response
	Replayed bool
	Waited   bool    // the request waited for another attempt's answer
	Outcome  Outcome // set even when Do returns an error
	Path     Path
}

// Config configures a Runner. Store, TTL and Lease are required.
type Config struct {
	Store Store
	TTL   time.Duration // how long a completed record is replayed
	Lease time.Duration // how long a claim is owned before another may take it over
	// Clock is a work's time and waits' (default time.Now); leases use the store's.
	Clock   func() time.Time
	Observe func(operation string, p Path, o Outcome) // if set, told every outcome (for metrics)
	// NewKeysPerSecond and NewKeysBurst bound each actor's new keys (zero: no bound; newkeys.go).
	NewKeysPerSecond float64
	NewKeysBurst     int
}

// Runner applies the state machine around a Work.
type Runner struct {
	cfg     Config
	waiters waiters
	newKeys *newKeys // nil: no bound
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
	case cfg.NewKeysPerSecond < 0 || (cfg.NewKeysPerSecond > 0 && cfg.NewKeysBurst < 1):
		return nil, errors.New("idempotency: a bound on new keys needs a positive rate and a burst of at least 1")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	r := &Runner{cfg: cfg, waiters: waiters{clock: cfg.Clock, m: map[Scope]*waitEntry{}}}
	if cfg.NewKeysPerSecond > 0 {
		r.newKeys = &newKeys{limit: rate.Limit(cfg.NewKeysPerSecond), burst: cfg.NewKeysBurst,
			clock: cfg.Clock, actors: map[string]*actorKeys{}}
	}
	return r, nil
}

const (
	tries             = 3                // bounds the reruns of Do's statement
	maxWait           = 10 * time.Second // caps Request.Wait
	releaseTimeout    = 5 * time.Second  // bounds one attempt to release a claim
	releaseWait       = time.Second      // how long a request waits for its release; the release goes on
	releaseBackoff    = 100 * time.Millisecond
	maxReleaseBackoff = time.Second
)

// Do runs work at most once for the request's scope and fingerprint, each turn
// one statement answered as Decide says. Errors: operation_in_progress,
// key_payload_mismatch, rate_limited; ctx's error when the client left during
// a wait; the store's or the work's.
func (r *Runner) Do(ctx context.Context, req Request, work Work) (Result, error) {
	var p *pass // req's admission under the bound on new keys
	defer func() { p.done() }()
	read := req.Retry    // a retry's key most likely exists: read it first
	readKind := Kind(-1) // what the last read found free, if it did
	waitUntil := r.cfg.Clock().Add(min(max(req.Wait, 0), maxWait))
	waited, reruns := false, 0
	var refused error // over the bound: the answer unless a read finds the key stored
	for {
		if !read && p == nil {
			if p, read, refused = r.admitNewKey(req, readKind); refused != nil && !read {
				return r.result(req, OutcomeRateLimited), refused
			}
		}
		c := Claim{Scope: req.Scope, Token: uuid.NewString()}
		var w KeyWrite
		var a Answer
		var err error
		switch {
		case read:
			if w.Prev, w.Now, err = r.lookup(ctx, req.Scope, refused != nil); err != nil && refused != nil {
				return r.result(req, OutcomeRateLimited), refused
			} else if apperr.Code(err) == apperr.Unavailable { // the write would wait for it as long
				return r.result(req, OutcomeFailed), err
			} else if err != nil { // taken as no key: the path's write decides
				w, err = KeyWrite{}, nil
			}
		case req.Path == OnePhase:
			a, w, err = r.completeAtomically(ctx, req, c, work)
			if errors.Is(err, ErrEffectNotApplied) && reruns+1 < tries {
				reruns++
				continue // the row the work read changed: decide again
			}
		default:
			w, err = r.claim(ctx, req, c)
		}
		if err != nil {
			return r.result(req, OutcomeFailed), err
		}

		switch d := Decide(w.Prev, req.Fingerprint, w.Now); d.Kind {
		case Replay:
			if waited {
				r.waiters.wake(req.Scope, &w.Prev.Response) // to the others waiting here
			}
			r.observe(req, OutcomeReplayed)
			return Result{Path: req.Path, Outcome: OutcomeReplayed, Response: w.Prev.Response, Replayed: true, Waited: waited}, nil
		case Mismatch:
			return r.result(req, OutcomeMismatch), apperr.Errorf(apperr.KeyPayloadMismatch,
				"this idempotency key was already used with a different request payload")
		case InProgress:
			if d.LeaseLeft > 2*r.cfg.TTL { // held far longer than a key is kept: no time to promise
				return r.result(req, OutcomeInProgress), InProgressError(0)
			}
			// Past the owner's deadline it is gone, and only its lease keeps the key.
			now := r.cfg.Clock()
			resp, end := r.waiters.await(ctx, req.Scope, now.Add(min(waitUntil.Sub(now), d.WorkLeft)))
			switch end {
			case answered:
				r.observe(req, OutcomeReplayed)
				return Result{Path: req.Path, Outcome: OutcomeReplayed, Response: *resp, Replayed: true, Waited: true}, nil
			case released, poll:
				read, waited = end == poll, true
				continue
			case left:
				return r.result(req, OutcomeInProgress), fmt.Errorf("wait for the first attempt: the client left: %w", ctx.Err())
			}
			return r.result(req, OutcomeInProgress), InProgressError(d.RetryAfter())
		default: // ClaimNew, TakeOverExpired or TakeOverLease: the key is this request's to write
			switch {
			case w.Wrote:
				o := r.wrote(req, d.Kind, p)
				if req.Path == OnePhase {
					return Result{Path: req.Path, Outcome: o, Response: a.Response}, nil
				}
				return r.run(ctx, req, c, o, work)
			case read:
				if waited {
					r.waiters.wake(req.Scope, nil) // the key is free again: the others run too
				}
				read, readKind = false, d.Kind
			case reruns+1 < tries: // a row the statement's snapshot could not see took the key
				reruns++
				r.observe(req, OutcomeRerun)
			default:
				return r.result(req, OutcomeInProgress), InProgressError(time.Second)
			}
		}
	}
}

// admitNewKey admits req under the bound on new keys. Over it, a key not yet
// read is read first (read, with the refusal); a lease to take over is no new key.
func (r *Runner) admitNewKey(req Request, readKind Kind) (p *pass, read bool, err error) {
	if r.newKeys == nil {
		return nil, false, nil
	}
	p, err = r.newKeys.admit(req.Scope, readKind == TakeOverLease)
	return p, p == nil && readKind < 0, err
}

// lookup reads s's key; over the bound for 250 ms at most: no wait behind the pool.
func (r *Runner) lookup(ctx context.Context, s Scope, overBound bool) (*Record, time.Time, error) {
	if overBound {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
	}
	return r.cfg.Store.Lookup(ctx, s)
}

// completeAtomically is the one-phase path: the work decides, then one
// statement writes the key completed with the change; a client that hangs up does not cancel it.
func (r *Runner) completeAtomically(ctx context.Context, req Request, c Claim, work Work) (Answer, KeyWrite, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.workBudget())
	defer cancel()
	a, err := work(ctx, c, r.cfg.Clock())
	if err != nil {
		return a, KeyWrite{}, err
	}
	w, err := r.cfg.Store.CompleteAtomically(ctx, c, req.Fingerprint, cmp.Or(req.TTL, r.cfg.TTL), a)
	if err != nil && !errors.Is(err, ErrEffectNotApplied) {
		err = fmt.Errorf("complete key: %w", err)
	}
	return a, w, err
}

// claim is the two-phase path's statement: the key written in progress.
func (r *Runner) claim(ctx context.Context, req Request, c Claim) (KeyWrite, error) {
	leaseEnd := r.cfg.Clock().Add(r.cfg.Lease) // no later than the store's
	w, err := r.cfg.Store.Claim(ctx, c, req.Fingerprint, r.cfg.Lease, cmp.Or(req.TTL, r.cfg.TTL))
	if err != nil {
		// It may have committed with its reply lost: release it by its token.
		_ = r.release(ctx, c, leaseEnd) // retried in the background; the claim's error is the answer
		return w, fmt.Errorf("claim key: %w", err)
	}
	return w, nil
}

// run is the two-phase path after its claim: the work, then the finish fenced
// by c's token (on a detached context), or the claim released on a failure.
func (r *Runner) run(ctx context.Context, req Request, c Claim, o Outcome, work Work) (Result, error) {
	leaseEnd := r.cfg.Clock().Add(r.cfg.Lease)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.workBudget())
	defer cancel()
	a, err := work(wctx, c, r.cfg.Clock())
	if err == nil {
		err = r.cfg.Store.FinishClaimAtomically(wctx, c, a)
	}
	switch {
	case err == nil:
		r.waiters.wake(c.Scope, &a.Response)
		return Result{Path: req.Path, Outcome: o, Response: a.Response}, nil
	case errors.Is(err, ErrLeaseLost):
		return r.result(req, OutcomeLeaseLost), InProgressError(time.Second)
	case apperr.Code(err) == apperr.OperationInProgress:
		return r.result(req, OutcomeInProgress), err // the work keeps its key
	}
	res := r.result(req, OutcomeReleased)
	defer r.waiters.wake(c.Scope, nil) // once released, a waiter may claim
	if rerr := r.release(ctx, c, leaseEnd); rerr != nil {
		return res, errors.Join(err, fmt.Errorf("release claim (retried in the background): %w", rerr))
	}
	return res, err
}

// release deletes claim c, retrying in the background until it succeeds or
// leaseEnd; it returns the first attempt's error, waiting at most releaseWait.
func (r *Runner) release(ctx context.Context, c Claim, leaseEnd time.Time) error {
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), leaseEnd)
		defer cancel()
		for attempt, wait := 1, releaseBackoff; ; attempt, wait = attempt+1, min(2*wait, maxReleaseBackoff) {
			actx, cancelAttempt := context.WithTimeout(ctx, releaseTimeout)
			err := r.cfg.Store.Release(actx, c)
			cancelAttempt()
			if attempt == 1 {
				first <- err
			}
			if err == nil {
				if attempt > 1 {
					r.waiters.wake(c.Scope, nil) // a waiter here may claim now
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait/2 + rand.N(wait/2)):
			}
		}
	}()
	select {
	case err := <-first:
		return err
	case <-time.After(releaseWait):
		return fmt.Errorf("no answer within %v", releaseWait)
	}
}

// wrote reports the outcome of a write where Decide said kind, and spends p's token on a new key.
func (r *Runner) wrote(req Request, kind Kind, p *pass) Outcome {
	o := OutcomeClaimed
	switch {
	case kind == TakeOverExpired:
		o = OutcomeExpiredTakenOver
	case kind == TakeOverLease:
		o = OutcomeLeaseTakenOver
	case req.Path == OnePhase:
		o = OutcomeCompleted
	}
	if kind != TakeOverLease {
		p.claimed()
	}
	r.observe(req, o)
	return o
}

// result is req's result with outcome o, which it reports.
func (r *Runner) result(req Request, o Outcome) Result {
	r.observe(req, o)
	return Result{Path: req.Path, Outcome: o}
}

func (r *Runner) observe(req Request, o Outcome) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(req.Scope.Operation, req.Path, o)
	}
}

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
