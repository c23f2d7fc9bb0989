package idempotency

import "time"

// State is the state of a stored key.
type State string

const (
	InProgress State = "in_progress" // claimed; the work runs or its owner died
	Completed  State = "completed"   // a response is stored and replayed
)

// Record is the stored decision for one scope.
type Record struct {
	Fingerprint string
	State       State
	LockedUntil time.Time // lease end, while in progress
	Response    Response  // while completed
	CreatedAt   time.Time // time of the claim
	CompletedAt time.Time
	ExpiresAt   time.Time // claim time + TTL
}

// Kind says what a request does with a key, given what is stored.
type Kind int

const (
	ClaimNew        Kind = iota // nothing stored: claim it and run the work
	TakeOverExpired             // the record expired: a new intent, claim it again
	TakeOverLease               // same intent, its owner's lease passed: claim it again
	Replay                      // completed with the same fingerprint: replay the response
	Busy                        // in progress, lease alive: 409 operation_in_progress
	Mismatch                    // a different fingerprint: 422 key_payload_mismatch
)

// Decision is what a request does with a key, and how long the lease has
// left when Kind is Busy.
type Decision struct {
	Kind      Kind
	LeaseLeft time.Duration
}

// Decide is the whole state machine of a key as seen by an arriving request
// with fingerprint fp at time now; prev is the stored record, nil if none.
//
// The claim statement of the store takes over a row in exactly the cases where
// Decide returns TakeOverExpired or TakeOverLease; the two must agree.
func Decide(prev *Record, fp string, now time.Time) Decision {
	switch {
	case prev == nil:
		return Decision{Kind: ClaimNew}
	case prev.Expired(now):
		return Decision{Kind: TakeOverExpired}
	case prev.Fingerprint != fp:
		return Decision{Kind: Mismatch}
	case prev.State == Completed:
		return Decision{Kind: Replay}
	case !now.Before(prev.LockedUntil):
		return Decision{Kind: TakeOverLease}
	default:
		return Decision{Kind: Busy, LeaseLeft: prev.LockedUntil.Sub(now)}
	}
}

// Expired reports whether the record is past its TTL and no live lease holds
// it: such a record is gone for every purpose (replay, lookup, sweeper).
func (r *Record) Expired(now time.Time) bool {
	return !now.Before(r.ExpiresAt) && (r.State == Completed || !now.Before(r.LockedUntil))
}
