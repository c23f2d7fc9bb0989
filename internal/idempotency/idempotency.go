// Package idempotency decides what a request carrying an Idempotency-Key does:
// run the work once and store its answer, replay the stored answer, say that
// the first attempt is still running (or wait for it), or refuse a key reused
// for a different payload. It knows neither HTTP nor SQL: a Store keeps the
// records, and any operation uses the same Runner by naming itself, its
// fingerprint and its work.
//
// A work never writes: it returns what it decided, and the store commits the
// change with the key's answer in one transaction, so a change never exists
// without its stored answer.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Effect is a business change that the store commits in the transaction that
// completes the key. Its type is the store's own; the Runner only carries it.
type Effect interface {
	// Describe names the change for errors, e.g. "insert demo request".
	Describe() string
}

// Decided is what a work decided: the answer to send, store and replay, and
// the change that commits with it (nil for none, such as a refusal).
type Decided struct {
	Response Response
	Effect   Effect
}

// Claim is the proof that a request owns a key. The store completes the key
// only while Token is still the current claim token.
type Claim struct {
	Scope Scope
	Token string
}

// ClaimResult is what a claiming statement found: either this request now
// owns the key (Claimed), or Prev is the record that stopped it.
type ClaimResult struct {
	Claimed bool
	Prev    *Record // the row before this statement, nil if there was none
	Now     time.Time
}

var (
	// ErrLeaseLost is returned by a finish whose claim token no longer holds
	// the key (another request took it over); nothing was committed.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrEffectNotApplied is returned when a business change found its row
	// no longer as the work read it (a request cancelled meanwhile). Nothing
	// was committed and a retry decides afresh, so it is transient: 503.
	ErrEffectNotApplied error = &apperr.Error{Code: apperr.Unavailable,
		Message: "the resource changed while this request was decided; send it again", RetryAfter: time.Second}
)

// Store keeps the records. Its time is the database clock, so that replicas
// agree on leases and expiry.
type Store interface {
	// Claim writes the scope's record in progress under token where Decide
	// lets it (free, expired, or its lease passed), committed before it
	// returns; otherwise it reports the record that stopped it.
	Claim(ctx context.Context, s Scope, fp, token string, lease, ttl time.Duration) (ClaimResult, error)
	// CreateResultAndFinishAtomically is the one-phase path: where Claim
	// would claim, one statement writes the record completed with d's
	// response and, FROM it, d's effect; otherwise it changes nothing and
	// reports the record that stopped it. Errors: ErrEffectNotApplied.
	CreateResultAndFinishAtomically(ctx context.Context, s Scope, fp, token string, ttl time.Duration, d Decided) (ClaimResult, error)
	// FinishClaimAtomically commits d's effect and completes c's record with
	// d's response in one transaction, only while c's token holds it.
	// Errors: ErrLeaseLost, ErrEffectNotApplied (nothing committed).
	FinishClaimAtomically(ctx context.Context, c Claim, d Decided) error
	// Release deletes the in-progress record of c so the key can run again.
	Release(ctx context.Context, c Claim) error
	// Lookup returns the record of a scope, nil if none, and the store's time.
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}

// Path says how an operation commits.
type Path string

const (
	// OnePhase is for a work that is a database write decided beforehand:
	// the work runs first, with no side effect, then one statement writes the
	// key completed with the answer and the change. With nothing to protect
	// between a claim and a finish, there is no claim.
	OnePhase Path = "one_phase"
	// TwoPhase is for a work outside the database (or held by a workshop
	// knob): claim the key in its own commit, so a retry sees it in
	// progress; run the work; finish, fenced by the claim token; release the
	// claim on a transient failure.
	TwoPhase Path = "two_phase"
)

// Outcome labels what a request did with its key, for logs and metrics.
type Outcome string

const (
	OutcomeClaimed          Outcome = "claimed"
	OutcomeExpiredTakenOver Outcome = "expired_taken_over"
	OutcomeLeaseTakenOver   Outcome = "lease_taken_over"
	OutcomeReplayed         Outcome = "replayed"
	OutcomeInProgress       Outcome = "in_progress"
	OutcomeMismatch         Outcome = "mismatch"
	OutcomeReleased         Outcome = "released"   // the work or its finish failed; the claim was released
	OutcomeLeaseLost        Outcome = "lease_lost" // the finish found the claim taken over
	OutcomeFailed           Outcome = "failed"     // the work, or the statement that writes the key, failed
	// OutcomeRerun counts a statement run again because a row its snapshot
	// could not see (a concurrent first request's) took the scope.
	OutcomeRerun Outcome = "rerun"
)

// Work decides an operation for an intent at time now, without writing: the
// Runner commits what it returns. Any error it returns, *apperr.Error too,
// is transient (the claim is released); a definite refusal is an answer, a
// Decided response with no effect.
type Work func(ctx context.Context, now time.Time) (Decided, error)

// Request is one attempt at an operation.
type Request struct {
	Scope       Scope
	Fingerprint string
	Path        Path
	// Wait is how long a request that finds its key in progress may wait
	// for the first attempt's answer (Prefer: wait), capped by MaxWait.
	Wait time.Duration
	// Retry says the client sends this intent again (X-Client-Attempt ≥ 2):
	// its key most likely exists, so the Runner reads it first (readFirst).
	Retry bool
	// TTL is how long this request's stored answer is replayed (0:
	// Config.TTL); an unfinished claim is held by its lease.
	TTL time.Duration
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
	// MaxWait caps Request.Wait (default 10 s).
	MaxWait time.Duration
	// Clock (default time.Now) is the time a work decides with and times
	// waits; leases and expiry are decided on the store's clock.
	Clock func() time.Time
	// Observe, if set, is told every outcome as it happens (for metrics).
	Observe func(operation string, p Path, o Outcome)
	// NewKeysPerSecond and NewKeysBurst bound each actor's new keys with a
	// token bucket in this process (zero: no bound). A request that would
	// store a new key over it is refused (rate_limited); one whose key is
	// stored and unexpired never is.
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
	case cfg.MaxWait < 0:
		return nil, errors.New("idempotency: MaxWait must not be negative")
	case cfg.NewKeysPerSecond < 0 || (cfg.NewKeysPerSecond > 0 && cfg.NewKeysBurst < 1):
		return nil, errors.New("idempotency: a bound on new keys needs a positive rate and a burst of at least 1")
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Runner{cfg: cfg, waiters: waiters{clock: cfg.Clock}, newKeys: newNewKeys(cfg.NewKeysPerSecond, cfg.NewKeysBurst, cfg.Clock)}, nil
}

func (r *Runner) ttl(req Request) time.Duration {
	if req.TTL > 0 {
		return req.TTL
	}
	return r.cfg.TTL
}

// WorkBudget is how long a claimed work may run: half the lease, so that it
// ends well before another request may take the key over.
func (r *Runner) WorkBudget() time.Duration { return r.cfg.Lease / 2 }

const (
	// reruns bounds a request's reruns after its snapshot missed a row.
	reruns = 3
	// releaseTimeout bounds one attempt to release a claim.
	releaseTimeout = 5 * time.Second
	// releaseWait bounds how long a request waits for its release before it
	// answers: plenty for a database that answers; the release goes on.
	releaseWait = time.Second
	// releaseBackoff and maxReleaseBackoff space a failed release's retries.
	releaseBackoff    = 100 * time.Millisecond
	maxReleaseBackoff = time.Second
)

// Do runs work at most once for the request's scope and fingerprint, on the
// request's path. Leases and expiry are decided on the store's clock
// (ClaimResult.Now), so that replicas agree; the rest on Config.Clock.
//
// Errors: operation_in_progress (with RetryAfter) while another attempt
// owns the key or after this one lost its lease; key_payload_mismatch for a
// key used with another fingerprint; rate_limited (with RetryAfter) for a
// new key over its actor's bound; ctx's error when the client left during a
// wait; any error of the store or the work (the claim, if any, released).
func (r *Runner) Do(ctx context.Context, req Request, work Work) (Result, error) {
	if req.Path == OnePhase {
		return r.onePhase(ctx, req, work)
	}
	own, res, err := r.Claim(ctx, req, func(ctx context.Context, c Claim, lease, ttl time.Duration) (ClaimResult, error) {
		leaseEnd := r.cfg.Clock().Add(lease) // no later than the store's
		cr, err := r.cfg.Store.Claim(ctx, req.Scope, req.Fingerprint, c.Token, lease, ttl)
		if err != nil {
			// The claim may have committed with its reply lost: release it
			// by its token, so the key is not blocked for a lease.
			r.release(ctx, c, leaseEnd)
		}
		return cr, err
	})
	if own == nil {
		return res, err
	}
	defer own.Done()
	return r.run(ctx, own, req, work)
}

// Owned is a request's hold on its key: the claim its statement wrote.
type Owned struct {
	Claim   Claim
	Now     time.Time // the store's time of the claim
	Outcome Outcome   // claimed, expired_taken_over or lease_taken_over

	leaseEnd time.Time // the lease's end on the Runner's clock, no later than the store's
	pass     *pass
}

// Done ends the request's part in its actor's bound on new keys.
func (o *Owned) Done() { o.pass.done() }

// Claim runs claim, a statement that writes req's key in progress under c's
// token where Decide lets it, or reports the record that holds it. It
// returns the claim req owns or else req's answer (replay, mismatch, in
// progress, rate_limited) or claim's error. Store.Claim is the two-phase
// path's claim; an operation of several steps brings its own statement.
func (r *Runner) Claim(ctx context.Context, req Request, claim func(ctx context.Context, c Claim, lease, ttl time.Duration) (ClaimResult, error)) (*Owned, Result, error) {
	p, answered, err := r.admit(ctx, req)
	if answered != nil {
		return nil, *answered, err
	}
	waitUntil := r.waitUntil(req)
	for tries := 0; ; tries++ {
		c := Claim{Scope: req.Scope, Token: uuid.NewString()}
		leaseEnd := r.cfg.Clock().Add(r.cfg.Lease)
		cr, err := claim(ctx, c, r.cfg.Lease, r.ttl(req))
		if err != nil {
			p.done()
			res, err := r.failed(req, fmt.Errorf("claim key: %w", err))
			return nil, res, err
		}
		if cr.Claimed {
			return &Owned{Claim: c, Now: cr.Now, Outcome: r.claimed(req, p, cr), leaseEnd: leaseEnd, pass: p}, Result{}, nil
		}
		if res, err, again := r.held(ctx, req, cr, waitUntil, tries); !again {
			p.done()
			return nil, res, err
		}
	}
}

// onePhase decides first, then runs CreateResultAndFinishAtomically: the key,
// its answer and the change where the scope is free, or the row that holds it.
func (r *Runner) onePhase(ctx context.Context, req Request, work Work) (Result, error) {
	p, answered, err := r.admit(ctx, req)
	if answered != nil {
		return *answered, err
	}
	defer p.done()
	waitUntil := r.waitUntil(req)
	// The statement is the finish: a client that hangs up must not cancel
	// it. Waiting for another attempt stops with the client, though.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.WorkBudget())
	defer cancel()
	for tries := 0; ; tries++ {
		d, err := work(wctx, r.cfg.Clock())
		if err != nil {
			return r.failed(req, err)
		}
		cr, err := r.cfg.Store.CreateResultAndFinishAtomically(wctx, req.Scope, req.Fingerprint, uuid.NewString(), r.ttl(req), d)
		switch {
		case errors.Is(err, ErrEffectNotApplied) && tries+1 < reruns:
			continue // the row the work read changed: read and decide again
		case err != nil:
			return r.failed(req, fmt.Errorf("claim key: %w", err))
		case cr.Claimed:
			return Result{Path: OnePhase, Outcome: r.claimed(req, p, cr), Response: d.Response}, nil
		}
		if res, err, again := r.held(ctx, req, cr, waitUntil, tries); !again {
			return res, err
		}
	}
}

// admit decides whether req goes on to its path's statement, or returns its
// answer: a retry reads its key first (readFirst); over the bound on new
// keys, a stored key is answered from a read (or goes on when its lease
// passed) and a new one is refused.
func (r *Runner) admit(ctx context.Context, req Request) (*pass, *Result, error) {
	read, kind := false, ClaimNew
	if req.Retry {
		var answered *Result
		var err error
		if kind, answered, err = r.readFirst(ctx, req, 0); answered != nil {
			return nil, answered, err
		}
		read = true
	}
	if r.newKeys == nil {
		return nil, nil, nil
	}
	p, wait := r.newKeys.admit(req.Scope)
	if p != nil {
		return p, nil, nil
	}
	if !read {
		var answered *Result
		var err error
		if kind, answered, err = r.readFirst(ctx, req, refusedReadWait); answered != nil {
			return nil, answered, err
		}
	}
	if kind == TakeOverLease {
		return r.newKeys.follow(req.Scope), nil, nil
	}
	r.observe(req.Scope, req.Path, OutcomeRateLimited)
	return nil, &Result{Path: req.Path, Outcome: OutcomeRateLimited}, rateLimited(wait)
}

// readFirst answers a request from one read of its key where the key decides
// it (replay, mismatch, in progress). Otherwise (no key, one to take over, or
// a failed read, taken as no key) it returns what it found, and the path's
// statement decides as for any request.
//
// within, when not 0, bounds the read.
func (r *Runner) readFirst(ctx context.Context, req Request, within time.Duration) (Kind, *Result, error) {
	rec, now, err := r.lookup(ctx, req.Scope, within)
	if err != nil || rec == nil {
		return ClaimNew, nil, nil
	}
	switch kind := Decide(rec, req.Fingerprint, now).Kind; kind {
	case Replay, Mismatch, InProgress:
		res, err, again := r.held(ctx, req, ClaimResult{Prev: rec, Now: now}, r.waitUntil(req), 0)
		if again {
			return kind, nil, nil
		}
		return kind, &res, err
	default:
		return kind, nil, nil
	}
}

// refusedReadWait bounds the read of a new key over its actor's bound: it
// only tells a stored key from a new one, and must not wait behind the pool
// (a flood of refused keys would hold it). Unread, the key is refused as new.
const refusedReadWait = 100 * time.Millisecond

// lookup is Store.Lookup, bounded by within when it is not 0.
func (r *Runner) lookup(ctx context.Context, s Scope, within time.Duration) (*Record, time.Time, error) {
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	return r.cfg.Store.Lookup(ctx, s)
}

// waitUntil is when a request stops waiting for another attempt's answer.
func (r *Runner) waitUntil(req Request) time.Time {
	return r.cfg.Clock().Add(min(max(req.Wait, 0), r.cfg.MaxWait))
}

// held answers a request whose statement found the scope held by cr.Prev, as
// Decide says on the store's clock: replay, mismatch, or in progress (409,
// or the replay after a wait). again says to run the statement again: the
// owner released the key during the wait, or a row the snapshot could not
// see took the scope (at most reruns times).
func (r *Runner) held(ctx context.Context, req Request, cr ClaimResult, waitUntil time.Time, tries int) (res Result, err error, again bool) {
	res = Result{Path: req.Path}
	d := Decide(cr.Prev, req.Fingerprint, cr.Now)
	switch d.Kind {
	case Replay:
		res.Outcome, res.Replayed, res.Response = OutcomeReplayed, true, cr.Prev.Response
	case Mismatch:
		res.Outcome = OutcomeMismatch
		err = apperr.Errorf(apperr.KeyPayloadMismatch, "this idempotency key was already used with a different request payload")
	case InProgress:
		if d.LeaseLeft > NeedsAttentionLease/2 {
			// No owner works on a key that needs attention: there is
			// nothing to wait for and no time to promise.
			res.Outcome, err = OutcomeInProgress, NeedsAttentionError()
			break
		}
		// Wait no longer than the owner's deadline: past it the owner is
		// gone, and only its lease keeps the key.
		until := waitUntil
		if deadline := r.cfg.Clock().Add(d.WorkLeft); deadline.Before(until) {
			until = deadline
		}
		answer, released := r.await(ctx, req.Scope, req.Fingerprint, until)
		switch {
		case answer != nil:
			res.Outcome, res.Replayed, res.Waited, res.Response = OutcomeReplayed, true, true, *answer
		case released:
			return res, nil, true // the owner released the key: run as a first request
		case ctx.Err() != nil:
			res.Outcome, err = OutcomeInProgress, fmt.Errorf("wait for the first attempt: the client left: %w", ctx.Err())
		default:
			res.Outcome, err = OutcomeInProgress, InProgressError(d.RetryAfter())
		}
	default:
		// Decide says claim or take over, yet the statement did not: a row
		// its snapshot could not see took the scope. Run it again.
		r.observe(req.Scope, req.Path, OutcomeRerun)
		if tries+1 < reruns {
			return res, nil, true
		}
		res.Outcome, err = OutcomeInProgress, InProgressError(time.Second)
	}
	r.observe(req.Scope, req.Path, res.Outcome)
	return res, err, false
}

// await waits until until for the answer of the attempt that owns s, handed
// over by an owner in this process or polled from the store (the owner may
// run on another replica). It returns the answer, or rerun when the key is
// free again (released, or its lease passed).
func (r *Runner) await(ctx context.Context, s Scope, fp string, until time.Time) (answer *Response, rerun bool) {
	e := r.waiters.register(s)
	for ctx.Err() == nil && r.cfg.Clock().Before(until) {
		if r.waiters.wait(ctx, e, until) {
			return e.resp, e.resp == nil
		}
		if !r.waiters.takePoll(e) {
			continue
		}
		rec, now, err := r.cfg.Store.Lookup(ctx, s)
		if err != nil {
			break
		}
		switch Decide(rec, fp, now).Kind {
		case InProgress:
			continue
		case Replay:
			r.waiters.wake(s, &rec.Response)
			return &rec.Response, false
		case Mismatch: // another intent took the key after it expired
			r.waiters.unregister(s, e)
			return nil, false
		default: // released, or its lease passed: run again
			r.waiters.wake(s, nil)
			return nil, true
		}
	}
	r.waiters.unregister(s, e)
	return nil, false
}

// run executes work for the claim own, and finishes it. The work gets a
// context detached from the client's, bounded by WorkBudget: a client that
// hangs up must not cancel the finish, and the work must end well before
// another request may take the key over.
func (r *Runner) run(ctx context.Context, own *Owned, req Request, work Work) (Result, error) {
	res := Result{Path: req.Path, Outcome: own.Outcome}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.WorkBudget())
	defer cancel()
	d, err := work(wctx, r.cfg.Clock())
	if err == nil {
		err = r.cfg.Store.FinishClaimAtomically(wctx, own.Claim, d)
	}
	switch {
	case err == nil:
		r.Answered(own.Claim.Scope, &d.Response)
		res.Response = d.Response
		return res, nil
	case errors.Is(err, ErrLeaseLost):
		res.Outcome = OutcomeLeaseLost
		r.Observe(own.Claim.Scope, req.Path, res.Outcome)
		return res, InProgressError(time.Second)
	}
	res.Outcome = OutcomeReleased
	r.Observe(own.Claim.Scope, req.Path, res.Outcome)
	defer r.Answered(own.Claim.Scope, nil) // once released, a waiter may claim
	if rerr := r.release(ctx, own.Claim, own.leaseEnd); rerr != nil {
		return res, errors.Join(err, fmt.Errorf("release claim (retried in the background): %w", rerr))
	}
	return res, err
}

// release deletes claim c (Store.Release), retried as LetGo says.
func (r *Runner) release(ctx context.Context, c Claim, leaseEnd time.Time) error {
	return r.LetGo(ctx, c, leaseEnd, r.cfg.Store.Release)
}

// LetGo runs free (a release of claim c, fenced by its token) on a context
// of its own, since the client may be gone. While the store cannot hear it
// it retries in the background, with jittered backoff, until it succeeds or
// the lease ends at leaseEnd: so the key is free as soon as the database
// answers, and the owner's Retry-After holds. It returns the first
// attempt's error, waiting for it at most releaseWait.
func (r *Runner) LetGo(ctx context.Context, c Claim, leaseEnd time.Time, free func(context.Context, Claim) error) error {
	first := make(chan error, 1)
	go r.letGoUntil(context.WithoutCancel(ctx), c, leaseEnd, free, first)
	select {
	case err := <-first:
		return err
	case <-time.After(releaseWait):
		return fmt.Errorf("no answer within %v", releaseWait)
	}
}

// letGoUntil tries free until it succeeds or leaseEnd, and sends the error
// of its first attempt to first.
func (r *Runner) letGoUntil(ctx context.Context, c Claim, leaseEnd time.Time, free func(context.Context, Claim) error, first chan<- error) {
	ctx, cancel := context.WithDeadline(ctx, leaseEnd)
	defer cancel()
	for attempt, wait := 1, releaseBackoff; ; attempt, wait = attempt+1, min(2*wait, maxReleaseBackoff) {
		actx, cancelAttempt := context.WithTimeout(ctx, releaseTimeout)
		err := free(actx, c)
		cancelAttempt()
		if attempt == 1 {
			first <- err
		}
		if err == nil {
			if attempt > 1 {
				r.Answered(c.Scope, nil) // a waiter here may claim now
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait/2 + rand.N(wait/2)):
		}
	}
}

// Answered hands the answer of the attempt that owned s to this process's
// waiters (nil: the owner let go, so they run their statement again).
func (r *Runner) Answered(s Scope, resp *Response) { r.waiters.wake(s, resp) }

// Observe reports outcome o of an attempt at s on path p (Config.Observe).
func (r *Runner) Observe(s Scope, p Path, o Outcome) { r.observe(s, p, o) }

// Clock is the Runner's clock (Config.Clock).
func (r *Runner) Clock() time.Time { return r.cfg.Clock() }

// Lease is how long a claim is owned before it may be taken over.
func (r *Runner) Lease() time.Duration { return r.cfg.Lease }

func (r *Runner) failed(req Request, err error) (Result, error) {
	res := Result{Path: req.Path, Outcome: OutcomeFailed}
	r.observe(req.Scope, req.Path, res.Outcome)
	return res, err
}

func (r *Runner) observe(s Scope, p Path, o Outcome) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(s.Operation, p, o)
	}
}

// claimed reports the outcome of a statement of req that wrote its key, as
// found in cr, and takes the token of p when the key is new: one where none
// was, or where one had expired. A lease taken over is the same key.
func (r *Runner) claimed(req Request, p *pass, cr ClaimResult) Outcome {
	o := OutcomeClaimed
	switch Decide(cr.Prev, req.Fingerprint, cr.Now).Kind {
	case TakeOverExpired:
		o = OutcomeExpiredTakenOver
	case TakeOverLease:
		o = OutcomeLeaseTakenOver
	}
	r.observe(req.Scope, req.Path, o)
	if o != OutcomeLeaseTakenOver {
		p.claimed()
	}
	return o
}

// NeedsAttentionLease is the lease of a key that needs attention: no owner
// works on it and it never expires until an operator lets it go; a request
// that finds it gets 409 without Retry-After. An operation of several steps
// holds its key so when its run cannot go on by itself.
const NeedsAttentionLease = 100 * 365 * 24 * time.Hour

// ErrNeedsAttention is the cause (Err) of the answer for a key that needs
// attention, where the transport may say how an operator lets it go.
var ErrNeedsAttention = errors.New("idempotency: the key needs attention")

// NeedsAttentionError is the answer to a request whose key needs
// attention: 409 operation_in_progress without Retry-After.
func NeedsAttentionError() error {
	return &apperr.Error{Code: apperr.OperationInProgress, Err: ErrNeedsAttention,
		Message: "this idempotency key needs attention: no retry moves it until an operator lets it go, and no one can say when that will be; the outcome route shows why"}
}

// InProgressError is the answer for a key another attempt owns: 409
// operation_in_progress, retry after retryAfter (at least a second).
func InProgressError(retryAfter time.Duration) error {
	return &apperr.Error{
		Code:       apperr.OperationInProgress,
		Message:    "a request with this idempotency key is still being processed",
		RetryAfter: max(retryAfter, time.Second),
	}
}
