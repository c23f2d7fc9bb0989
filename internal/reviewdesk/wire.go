package reviewdesk

import "time"

// The review desk's wire words: its routes, headers and JSON fields. They
// belong to the desk, not to this service: a rename of the example leaves
// them as they are.

// The desk's routes. A %s is a key, path-escaped; a path ending in / takes
// the key after it (a lookup).
const (
	submitPath           = "/v1/submissions"           // POST: Submit
	submissionStatusPath = "/v1/submissions/"          // GET: Status
	cancelPath           = "/v1/submissions/%s/cancel" // POST: Cancel, of the submission's key
	cancelStatusPath     = "/v1/cancels/"              // GET: CancelStatus
)

// idempotencyKeyHeader carries the sender's key on every keyed call.
const idempotencyKeyHeader = "Idempotency-Key"

// AccountHeader names, on a call, the account it is made for.
const AccountHeader = "Desk-Account"

// Submission is what the demo hands the desk.
type Submission struct {
	RequestID string `json:"requestId"`
	Topic     string `json:"topic"`
	Note      string `json:"note"`
}

// Receipt is the desk's record of an accepted call under its key.
type Receipt struct {
	Key        string    `json:"key"`
	Reference  string    `json:"reference"`
	AcceptedAt time.Time `json:"acceptedAt"`
	// State is what became of it, in a lookup's answer: accepted, or a
	// submission cancelled.
	State string `json:"state,omitempty"`
}

// problem is the desk's refusal body.
type problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}
