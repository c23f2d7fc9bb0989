// Package idempotency decides what a request carrying an Idempotency-Key does:
// run the work once and store its answer, replay the stored answer, say that
// the first attempt is still running (or wait for it), or refuse a key reused
// for a different payload. It knows neither HTTP nor SQL: a Store keeps the
// records, and any operation uses the same Runner by naming itself, its
// fingerprint and its work.
//
// An operation's work never writes anything itself. It returns what it
// decided (the answer and the business change), and the Runner hands that to
// the store, which commits the change and completes the key in one
// transaction (createResultAndFinishAtomically). So a work cannot forget to
// finish its key, and a change never exists without its stored answer.
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

// Effect is a business change that the store commits in the same
// transaction that completes the key. Its concrete type is the store's own
// (the postgres store makes them); the Runner only carries it from the work
// back to that store.
type Effect interface {
	// Describe names the change for errors, e.g. "insert demo request".
	Describe() string
}

// Decided is what a work decided for an intent: the answer to send, store
// and replay, and the change that commits with it (nil for an answer that
// changes nothing, such as a refusal).
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
	// ErrLeaseLost is returned by a store's finish when the claim token no
	// longer matches: another request took the key over, and nothing of
	// this finish was committed.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrEffectNotApplied is returned by a store when a business change
	// found its row no longer as the work had read it (a cancel of a request
	// that another request cancelled meanwhile). Nothing was committed; the
	// request may run again and decide afresh. It is transient: 503.
	ErrEffectNotApplied error = &apperr.Error{Code: apperr.Unavailable,
		Message: "the resource changed while this request was decided; send it again", RetryAfter: time.Second}
)

// Store keeps the records. Its time is the database clock, so that replicas
// agree on leases and expiry.
type Store interface {
	// Claim inserts an in-progress record for the scope with the claim
	// token, or takes over an expired one or one whose lease passed with the
	// same fingerprint, in one atomic statement committed before it returns.
	Claim(ctx context.Context, s Scope, fp, token string, lease, ttl time.Duration) (ClaimResult, error)
	// CreateResultAndFinishAtomically is the path both demo operations take
	// (one phase): in one statement it inserts the record already completed
	// with d's response, and FROM it d's effect, where Claim would have
	// claimed; otherwise it changes nothing and reports the record that
	// stopped it. Errors: ErrEffectNotApplied.
	CreateResultAndFinishAtomically(ctx context.Context, s Scope, fp, token string, ttl time.Duration, d Decided) (ClaimResult, error)
	// FinishClaimAtomically is the two-phase finish: it commits d's effect
	// and completes the claim with d's response in one transaction, only
	// while c's token holds the key. Errors: ErrLeaseLost,
	// ErrEffectNotApplied (nothing committed).
	FinishClaimAtomically(ctx context.Context, c Claim, d Decided) error
	// Release deletes the in-progress record of c so the key can run again.
	Release(ctx context.Context, c Claim) error
	// Lookup returns the record of a scope, nil if none, and the store's time.
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}

// Path says how an operation commits.
type Path string

const (
	// OnePhase is for a work that is itself a database write decided in Go
	// beforehand: the work runs first, with no side effect, and one
	// statement then inserts the key completed with the answer and the
	// change. There is nothing to protect between a claim and a finish, so
	// there is no claim.
	OnePhase Path = "one_phase"
	// TwoPhase is for a work that runs outside the database (or that asks
	// for it, such as a request held by a workshop knob): claim the key in
	// its own commit, so a retry sees it in progress; run the work; then
	// finish, fenced by the claim token; release the claim on a transient
	// failure.
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
	OutcomeReleased         Outcome = "released"   // the work failed transiently; the claim was released
	OutcomeLeaseLost        Outcome = "lease_lost" // the finish found the claim taken over
	OutcomeFailed           Outcome = "failed"     // one phase: the work or the statement failed; nothing was written
	// OutcomeRerun counts a statement that found its scope taken by a row
	// its snapshot could not see (a concurrent first request committed in
	// between): the request runs the statement again and then replays.
	OutcomeRerun Outcome = "rerun"
)

// Work decides an operation for an intent at time now and returns what it
// decided, without writing anything: the Runner commits it. An
// *apperr.Error it returns is transient like any other error (the claim is
// released): a definite refusal is an answer, so the work returns it as a
// Decided response with no effect.
type Work func(ctx context.Context, now time.Time) (Decided, error)

// Request is one attempt at an operation.
type Request struct {
	Scope       Scope
	Fingerprint string
	Path        Path
	// Wait is how long a request that finds its key in progress may wait
	// for the first attempt's answer instead of answering 409 at once
	// (Prefer: wait). The Runner caps it.
	Wait time.Duration
	// Retry says the client sends this intent again (X-Client-Attempt ≥ 2):
	// its key most likely exists, so the Runner reads it first (readFirst).
	Retry bool
	// StopAfter, a workshop knob of a StepWise request, ends the run after
	// the named step as if its runner died there, or at once when the run
	// is already past it (DoSteps).
	StopAfter string
	// TTL, a workshop knob, is how long this request's record is replayed
	// when it claims the key (0: Config.TTL). It applies to the record this
	// request writes only: a lease still holds an unfinished claim.
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
	// Clock is the Runner's clock (default time.Now): the time a work
	// decides with, and how long a request waits. Leases and expiry are
	// decided on the store's clock.
	Clock func() time.Time
	// Observe, if set, is told every outcome as it happens (for metrics).
	Observe func(operation string, p Path, o Outcome)
	// NewKeysPerSecond and NewKeysBurst bound the new keys of each actor:
	// a token bucket per actor, in this process, that refills at
	// NewKeysPerSecond and holds NewKeysBurst. A request that would store a
	// new key over the bound is refused (rate_limited), and nothing is
	// stored; a request whose key is stored is never refused by it. Zero:
	// no bound.
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
	return &Runner{cfg: cfg, waiters: waiters{clock: cfg.Clock}, newKeys: newNewKeys(cfg.NewKeysPerSecond, cfg.NewKeysBurst)}, nil
}

// ttl is how long the record req writes is replayed.
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
	// reruns bounds how often one request runs its statement again after a
	// snapshot missed a concurrent row.
	reruns = 3
	// releaseTimeout bounds one attempt to release a claim.
	releaseTimeout = 5 * time.Second
	// releaseWait is how long a request waits for its release before it
	// answers: plenty for a database that answers, short of a partition's
	// wait. The release goes on in the background.
	releaseWait = time.Second
	// releaseBackoff and maxReleaseBackoff space the attempts of a release
	// that failed.
	releaseBackoff    = 100 * time.Millisecond
	maxReleaseBackoff = time.Second
)

// Do runs work at most once for the request's scope and fingerprint, on
// the request's path.
//
// Two clocks decide, each named where it is read: the store's
// (ClaimResult.Now, the database clock) for what the contract decides,
// leases and expiry, so that replicas agree; and the Runner's clock
// (Config.Clock) for the rest: the time a work decides with, and how long a
// request waits.
//
// Errors: operation_in_progress (with RetryAfter) while another attempt owns
// the key, or after this one lost its lease; ctx's error when its client left
// while it waited for another attempt; key_payload_mismatch when the
// key was used with a different fingerprint; rate_limited (with RetryAfter)
// when the key is new and its actor is over the bound on new keys; any
// error of the store or of the work (the claim, if any, released).
func (r *Runner) Do(ctx context.Context, req Request, work Work) (Result, error) {
	p, res, done, err := r.admit(ctx, req)
	if done {
		return res, err
	}
	defer p.done()
	if req.Path == OnePhase {
		return r.onePhase(ctx, req, work, p)
	}
	return r.twoPhase(ctx, req, work, p)
}

// admit decides whether req goes on to its path's statement: a retry first
// reads its key (readFirst); then the bound on new keys admits it (newKeys)
// or, when its actor is over the bound, the store is asked: a stored key
// is answered from the read, or goes on without a token when its lease
// passed; a new one is refused. It reports done with the answer when req
// goes no further.
func (r *Runner) admit(ctx context.Context, req Request) (p *pass, res Result, done bool, err error) {
	read, kind := false, ClaimNew
	if req.Retry {
		if res, kind, done, err = r.readFirst(ctx, req); done {
			return nil, res, done, err
		}
		read = true
	}
	if r.newKeys == nil {
		return nil, res, false, nil
	}
	p, wait := r.newKeys.admit(req.Scope, r.cfg.Clock())
	if p != nil {
		return p, res, false, nil
	}
	if !read {
		if res, kind, done, err = r.readFirst(ctx, req); done {
			return nil, res, done, err
		}
	}
	if kind == TakeOverLease {
		return r.newKeys.follow(req.Scope), res, false, nil
	}
	res = Result{Path: req.Path, Outcome: OutcomeRateLimited}
	r.observe(req.Scope, req.Path, res.Outcome)
	return nil, res, true, rateLimited(wait)
}

// readFirst answers a request from one read of its key when the key decides
// it (a replay, a mismatch, a busy key: 409 or the wait's replay), so a
// retry reads instead of running the path's statement. It reports done
// false, with what the read found, when it found no key, one to take over,
// or failed (then as no key): then the path's statement runs, and its race
// rules decide as for any request.
func (r *Runner) readFirst(ctx context.Context, req Request) (res Result, kind Kind, done bool, err error) {
	res = Result{Path: req.Path}
	rec, now, err := r.cfg.Store.Lookup(ctx, req.Scope)
	if err != nil || rec == nil {
		return res, ClaimNew, false, nil
	}
	switch kind = Decide(rec, req.Fingerprint, now).Kind; kind {
	case Replay, Mismatch, Busy:
		done, err = r.taken(ctx, req, ClaimResult{Prev: rec, Now: now}, r.waitUntil(req), &res, 0)
		return res, kind, done, err
	}
	return res, kind, false, nil
}

// onePhase decides first, then runs one statement that writes the key
// completed with the answer and the business change where the scope is
// free (CreateResultAndFinishAtomically), or reports the row that holds it.
func (r *Runner) onePhase(ctx context.Context, req Request, work Work, p *pass) (Result, error) {
	res := Result{Path: OnePhase}
	waitUntil := r.waitUntil(req)
	// The statement is the finish: a client that hangs up must not cancel
	// it. Waiting for another attempt stops with the client, though.
	clientCtx := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.WorkBudget())
	defer cancel()
	for tries := 0; ; tries++ {
		d, err := work(ctx, r.cfg.Clock())
		if err != nil {
			return r.failed(res, req.Scope, err)
		}
		cr, err := r.cfg.Store.CreateResultAndFinishAtomically(ctx, req.Scope, req.Fingerprint, uuid.NewString(), r.ttl(req), d)
		switch {
		case errors.Is(err, ErrEffectNotApplied) && tries+1 < reruns:
			continue // the row the work read changed: read and decide again
		case err != nil:
			return r.failed(res, req.Scope, fmt.Errorf("claim key: %w", err))
		case cr.Claimed:
			res.Outcome, res.Response = claimOutcome(Decide(cr.Prev, req.Fingerprint, cr.Now).Kind), d.Response
			r.observe(req.Scope, OnePhase, res.Outcome)
			r.claimed(p, res.Outcome)
			return res, nil
		}
		if done, err := r.taken(clientCtx, req, cr, waitUntil, &res, tries); done {
			return res, err
		}
	}
}

// twoPhase claims the key in its own commit, runs the work, and finishes
// the claim fenced by its token (run).
func (r *Runner) twoPhase(ctx context.Context, req Request, work Work, p *pass) (Result, error) {
	res := Result{Path: TwoPhase}
	waitUntil := r.waitUntil(req)
	for tries := 0; ; tries++ {
		c := Claim{Scope: req.Scope, Token: uuid.NewString()}
		leaseEnd := r.cfg.Clock().Add(r.cfg.Lease) // no later than the store's
		cr, err := r.cfg.Store.Claim(ctx, req.Scope, req.Fingerprint, c.Token, r.cfg.Lease, r.ttl(req))
		if err != nil {
			// The claim may have committed with its reply lost: release it
			// by its token, so the key is not blocked for a lease.
			r.release(ctx, c, leaseEnd)
			return r.failed(res, req.Scope, fmt.Errorf("claim key: %w", err))
		}
		if cr.Claimed {
			res.Outcome = claimOutcome(Decide(cr.Prev, req.Fingerprint, cr.Now).Kind)
			r.observe(req.Scope, TwoPhase, res.Outcome)
			r.claimed(p, res.Outcome)
			return r.run(ctx, c, leaseEnd, res, work)
		}
		if done, err := r.taken(ctx, req, cr, waitUntil, &res, tries); done {
			return res, err
		}
	}
}

// waitUntil is when a request that finds its key in progress stops waiting
// for another attempt's answer (Prefer: wait, capped).
func (r *Runner) waitUntil(req Request) time.Time {
	return r.cfg.Clock().Add(min(max(req.Wait, 0), r.cfg.MaxWait))
}

// taken answers a request whose statement found the scope held by the row
// cr.Prev, as Decide says on the store's clock: replay, mismatch, or busy
// (409, or the replay after a wait). It reports done false when the request
// should run its statement again: the owner released the key while it
// waited, or a row its snapshot could not see took the scope (at most
// reruns times in all).
func (r *Runner) taken(ctx context.Context, req Request, cr ClaimResult, waitUntil time.Time, res *Result, tries int) (done bool, err error) {
	d := Decide(cr.Prev, req.Fingerprint, cr.Now)
	switch d.Kind {
	case Replay:
		res.Outcome, res.Replayed, res.Response = OutcomeReplayed, true, cr.Prev.Response
		r.observe(req.Scope, res.Path, res.Outcome)
		return true, nil
	case Mismatch:
		res.Outcome = OutcomeMismatch
		r.observe(req.Scope, res.Path, res.Outcome)
		return true, apperr.Errorf(apperr.KeyPayloadMismatch,
			"this idempotency key was already used with a different request payload")
	case Busy:
		if d.LeaseLeft > needsAttentionLease/2 {
			// Only a run that needs attention holds its key this long: no
			// owner works on it, so there is nothing to wait for and no
			// time to promise.
			res.Outcome = OutcomeInProgress
			r.observe(req.Scope, res.Path, res.Outcome)
			return true, runNeedsAttention()
		}
		// Wait no longer than the owner's deadline: past it the owner is
		// gone, and only its lease keeps the key.
		until := waitUntil
		if deadline := r.cfg.Clock().Add(d.WorkLeft); deadline.Before(until) {
			until = deadline
		}
		answer, again := r.await(ctx, req.Scope, req.Fingerprint, until)
		switch {
		case answer != nil:
			res.Outcome, res.Replayed, res.Waited, res.Response = OutcomeReplayed, true, true, *answer
			r.observe(req.Scope, res.Path, res.Outcome)
			return true, nil
		case again:
			res.Waited = true // the owner released the key: run as a first request
			return false, nil
		}
		res.Outcome = OutcomeInProgress
		r.observe(req.Scope, res.Path, res.Outcome)
		if err := ctx.Err(); err != nil {
			return true, fmt.Errorf("wait for the first attempt: the client left: %w", err)
		}
		return true, inProgress(d.RetryAfter())
	}
	// Decide says claim or take over, yet the statement did not: a row its
	// snapshot could not see took the scope. Run it again.
	r.observe(req.Scope, res.Path, OutcomeRerun)
	if tries+1 >= reruns {
		res.Outcome = OutcomeInProgress
		return true, inProgress(time.Second)
	}
	return false, nil
}

// await waits until until for the answer of the attempt that owns s: handed
// over by an owner in this process, or read from the store at each poll (the
// owner may run on another replica). It returns the answer, or whether the
// key is free again so the request should run its statement again (the
// owner released it, or its lease passed).
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
		case Busy:
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

// run executes work for a claim this request owns, and finishes it. The work
// gets a context detached from the client's, bounded by WorkBudget: a client
// that hangs up must not cancel the finish, and the work must end well before
// another request may take the key over.
func (r *Runner) run(ctx context.Context, c Claim, leaseEnd time.Time, res Result, work Work) (Result, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.WorkBudget())
	defer cancel()
	d, err := work(wctx, r.cfg.Clock())
	if err == nil {
		err = r.cfg.Store.FinishClaimAtomically(wctx, c, d)
	}
	switch {
	case err == nil:
		r.waiters.wake(c.Scope, &d.Response)
		res.Response = d.Response
		return res, nil
	case errors.Is(err, ErrLeaseLost):
		res.Outcome = OutcomeLeaseLost
		r.observe(c.Scope, TwoPhase, res.Outcome)
		return res, inProgress(time.Second)
	}
	res.Outcome = OutcomeReleased
	r.observe(c.Scope, TwoPhase, res.Outcome)
	defer r.waiters.wake(c.Scope, nil) // once released, a waiter may claim
	if rerr := r.release(ctx, c, leaseEnd); rerr != nil {
		return res, errors.Join(err, fmt.Errorf("release claim (retried in the background): %w", rerr))
	}
	return res, err
}

// release deletes claim c so that its key can run again (Store.Release),
// retried in the background while the store cannot hear it (letGo).
func (r *Runner) release(ctx context.Context, c Claim, leaseEnd time.Time) error {
	return r.letGo(ctx, c, leaseEnd, r.cfg.Store.Release)
}

// letGo runs free (a release of claim c, fenced by its token) on a context
// of its own (the client may be gone). While the store cannot hear it (a
// restart, a partition), it keeps trying in the background with bounded,
// jittered backoff until it succeeds or the lease ends at leaseEnd (the key
// then frees itself): so a key whose owner gave up is free as soon as the
// database answers again, and the Retry-After of the owner's 503 is true.
// It waits for the first attempt at most releaseWait, and returns its
// error. The two-phase path frees its claim with it (release), the
// step-wise path its run's (Runner.releaseRun).
func (r *Runner) letGo(ctx context.Context, c Claim, leaseEnd time.Time, free func(context.Context, Claim) error) error {
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
}

func (r *Runner) failed(res Result, s Scope, err error) (Result, error) {
	res.Outcome = OutcomeFailed
	r.observe(s, res.Path, res.Outcome)
	return res, err
}

func (r *Runner) observe(s Scope, p Path, o Outcome) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(s.Operation, p, o)
	}
}

// claimed takes the token of p when its claim wrote a new key: one where
// none was, or where one had expired. A lease taken over is the same key.
func (r *Runner) claimed(p *pass, o Outcome) {
	if o == OutcomeClaimed || o == OutcomeExpiredTakenOver {
		p.claimed(r.cfg.Clock())
	}
}

func claimOutcome(k Kind) Outcome {
	switch k {
	case TakeOverExpired:
		return OutcomeExpiredTakenOver
	case TakeOverLease:
		return OutcomeLeaseTakenOver
	}
	return OutcomeClaimed
}

func inProgress(retryAfter time.Duration) error {
	return &apperr.Error{
		Code:       apperr.OperationInProgress,
		Message:    "a request with this idempotency key is still being processed",
		RetryAfter: max(retryAfter, time.Second),
	}
}
