// Package idempotency decides what a request carrying an Idempotency-Key does:
// claim the key and run the work once, replay the stored response, answer that
// the first attempt is still running, or refuse a key reused for a different
// payload. It knows neither HTTP routing nor SQL: a Store keeps the records,
// and any operation uses the same Runner by naming itself and its
// significant fields.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

// Scope names one key: keys of different actors or operations never meet.
type Scope struct {
	Actor     string
	Operation string // e.g. "demo-requests.create"
	Key       string
}

// Response is what the work answered, stored and replayed byte for byte.
type Response struct {
	Status   int
	Header   map[string]string // the headers worth replaying (Location, Content-Type)
	Body     []byte
	ResultID string // id of what the work created, if anything
}

// Claim is the proof that a request owns a key. The store completes the key
// only while Token is still the current claim token.
type Claim struct {
	Scope Scope
	Token string
	Now   time.Time // database time of the claim: use it as "created at"
}

// ClaimResult is what the claim statement found: either this request now owns
// the key (Claimed), or Prev is the record that stopped it.
type ClaimResult struct {
	Claimed bool
	Claim   Claim   // when Claimed
	Prev    *Record // the row before this statement, nil if there was none
	Now     time.Time
}

// ErrLeaseLost is returned by a store's finish when the claim token no longer
// matches: another request took the key over and this work was rolled back.
var ErrLeaseLost = errors.New("idempotency: lease lost")

// Store keeps the records. Its time is the database clock, so that replicas
// agree on leases and expiry.
type Store interface {
	// Claim inserts an in-progress record for the scope, or takes over an
	// expired one or one whose lease passed with the same fingerprint, in one
	// atomic statement committed before it returns.
	Claim(ctx context.Context, s Scope, fp string, lease, ttl time.Duration) (ClaimResult, error)
	// Finish completes the claim with resp and no business effect (used for
	// refusals). It returns ErrLeaseLost when the claim was taken over.
	Finish(ctx context.Context, c Claim, resp Response) error
	// Release deletes the in-progress record of c so the key can run again.
	Release(ctx context.Context, c Claim) error
	// Lookup returns the record of a scope, nil if none, and the store's time.
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}

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
)

// Work runs the operation for a claim. On success it has already completed the
// key atomically with its business effect (through its store) and returns the
// response it stored. An *apperr.Error it returns is a definite refusal and is
// stored and replayed like a success; any other error is transient: the claim
// is released so the same key can run again.
type Work func(ctx context.Context, c Claim) (Response, error)

// Result is the answer to a request.
type Result struct {
	Response Response
	Replayed bool
	Outcome  Outcome // set even when Do returns an error
}

// Runner applies the state machine around Work.
type Runner struct {
	Store Store
	TTL   time.Duration // how long a completed record is replayed
	Lease time.Duration // how long a claim is owned before another may take it over
	// Refusal renders the response to store for an *apperr.Error returned by
	// the work; false means the error is transient and the claim is released.
	Refusal func(*apperr.Error) (Response, bool)
	// Observe, if set, is told every outcome as it happens (for metrics): one
	// of the claim outcomes, then released or lease_lost if the work failed.
	Observe func(operation string, o Outcome)
}

// claimAttempts bounds how often a claim is retried when the row changed
// between the statement's snapshot and its conflict check.
const claimAttempts = 3

// releaseTimeout bounds the release of a claim after a failed work.
const releaseTimeout = 5 * time.Second

// Do runs work at most once for the scope and fingerprint fp.
//
// Errors: operation_in_progress (with RetryAfter) while another attempt owns
// the key or after this one lost its lease; key_payload_mismatch when the key
// was used with a different fingerprint; any error of the store or transient
// error of the work, after releasing the claim.
func (r *Runner) Do(ctx context.Context, s Scope, fp string, work Work) (Result, error) {
	for range claimAttempts {
		cr, err := r.Store.Claim(ctx, s, fp, r.Lease, r.TTL)
		if err != nil {
			return Result{}, fmt.Errorf("claim key: %w", err)
		}
		d := Decide(cr.Prev, fp, cr.Now)
		if cr.Claimed {
			return r.run(ctx, cr.Claim, d.Kind, work)
		}
		switch d.Kind {
		case Replay:
			r.observe(s, OutcomeReplayed)
			return Result{Response: cr.Prev.Response, Replayed: true, Outcome: OutcomeReplayed}, nil
		case Busy:
			r.observe(s, OutcomeInProgress)
			return Result{Outcome: OutcomeInProgress}, inProgress(d.LeaseLeft)
		case Mismatch:
			r.observe(s, OutcomeMismatch)
			return Result{Outcome: OutcomeMismatch}, apperr.Errorf(apperr.KeyPayloadMismatch,
				"this idempotency key was already used with a different request payload")
		}
		// Decide says claim or take over, yet the statement did not: the row
		// changed between the statement's snapshot and its conflict check.
	}
	r.observe(s, OutcomeInProgress)
	return Result{Outcome: OutcomeInProgress}, inProgress(time.Second)
}

// run executes work for a claim this request owns. The work gets a context
// detached from the client's, bounded by half the lease: a client that hangs
// up must not cancel the finish, and the work should end well before another
// request may take the key over.
func (r *Runner) run(ctx context.Context, c Claim, kind Kind, work Work) (Result, error) {
	res := Result{Outcome: OutcomeClaimed}
	switch kind {
	case TakeOverExpired:
		res.Outcome = OutcomeExpiredTakenOver
	case TakeOverLease:
		res.Outcome = OutcomeLeaseTakenOver
	}
	r.observe(c.Scope, res.Outcome)

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Lease/2)
	defer cancel()
	resp, err := work(wctx, c)
	if refusal, ok := errors.AsType[*apperr.Error](err); ok {
		if stored, definite := r.Refusal(refusal); definite {
			resp, err = stored, r.Store.Finish(wctx, c, stored)
		}
	}
	switch {
	case err == nil:
		res.Response = resp
		return res, nil
	case errors.Is(err, ErrLeaseLost):
		res.Outcome = OutcomeLeaseLost
		r.observe(c.Scope, res.Outcome)
		return res, inProgress(time.Second)
	}
	res.Outcome = OutcomeReleased
	r.observe(c.Scope, res.Outcome)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if rerr := r.Store.Release(rctx, c); rerr != nil {
		// The key frees itself once the lease passes.
		return res, errors.Join(err, fmt.Errorf("release claim: %w", rerr))
	}
	return res, err
}

func (r *Runner) observe(s Scope, o Outcome) {
	if r.Observe != nil {
		r.Observe(s.Operation, o)
	}
}

func inProgress(leaseLeft time.Duration) error {
	return &apperr.Error{
		Code:       apperr.OperationInProgress,
		Message:    "a request with this idempotency key is still being processed",
		RetryAfter: max(leaseLeft, time.Second),
	}
}
