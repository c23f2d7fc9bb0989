package idempotency

import "time"

// State is the state of a stored key.
type State string

const (
	StateInProgress State = "in_progress" // claimed; the work runs or its owner died
	StateCompleted  State = "completed"   // a response is stored and replayed
)

// Record is the stored decision for one scope.
type Record struct {
	Fingerprint string
	State       State
	LeaseUntil  time.Time // end of the claim's lease, while in progress
	Response    Response  // while completed
	CreatedAt   time.Time // time of the claim
	CompletedAt time.Time
	ExpiresAt   time.Time // once completed: the answer's time + TTL
}

// Kind says what a request does with a key, given what is stored.
type Kind int

const (
	ClaimNew        Kind = iota // nothing stored: claim it and run the work
	TakeOverExpired             // the record expired: a new intent, claim it again
	TakeOverLease               // same intent, its owner's lease passed: claim it again
	Replay                      // completed with the same fingerprint: replay the response
	InProgress                  // in progress, lease alive: wait, or 409 operation_in_progress
	Mismatch                    // a different fingerprint: 422 key_payload_mismatch
)

// Decision is what a request does with a key.
type Decision struct {
	Kind      Kind
	WorkLeft  time.Duration // InProgress: until the owner's work must have ended (half the lease)
	LeaseLeft time.Duration // InProgress: until another request may take the key over
}

// RetryAfter is until the owner's deadline, else until its lease passes; at least a second.
func (d Decision) RetryAfter() time.Duration {
	if d.WorkLeft > 0 {
		return max(d.WorkLeft, time.Second)
	}
	return max(d.LeaseLeft, time.Second)
}

// Decide is the whole state machine of a key, for a request with fingerprint fp at now;
// prev is the stored record, nil if none. The store's statements take a row over where it says.
func Decide(prev *Record, fp string, now time.Time) Decision {
	switch {
	case prev == nil:
		return Decision{Kind: ClaimNew}
	case prev.Expired(now):
		return Decision{Kind: TakeOverExpired}
	case prev.Fingerprint != fp:
		return Decision{Kind: Mismatch}
	case prev.State == StateCompleted:
		return Decision{Kind: Replay}
	case !now.Before(prev.LeaseUntil):
		return Decision{Kind: TakeOverLease}
	default:
		deadline := prev.CreatedAt.Add(prev.LeaseUntil.Sub(prev.CreatedAt) / 2)
		return Decision{Kind: InProgress, WorkLeft: max(deadline.Sub(now), 0), LeaseLeft: prev.LeaseUntil.Sub(now)}
	}
}

// Expired reports whether the record's answer is past its TTL; one in progress never expires.
func (r *Record) Expired(now time.Time) bool {
	return r.State == StateCompleted && !now.Before(r.ExpiresAt)
}
