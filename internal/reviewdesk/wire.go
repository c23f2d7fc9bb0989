package reviewdesk

import "time"

// The review desk's wire words: they belong to the desk, and a rename of the
// example leaves them as they are.

// The desk's routes: %s, or what follows a final /, is a key, path-escaped.
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
	State      string    `json:"state,omitempty"` // in a lookup's answer: accepted, or cancelled
}

// problem is the desk's refusal body.
type problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}
