package reviewdesk

import "time"

// The review desk's wire words: its routes, its headers and the JSON fields
// of what it takes and answers. They belong to the desk, the other system,
// not to this service: a rename of the example (demo requests, their
// cancel, into your own) must leave every string in this file as it is, as
// it must the test double that speaks them (testenv/deskdouble.go). They
// change only when the desk does.

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
	// State is what became of it, as the lookups answer it (a submission:
	// accepted or cancelled; a cancel: accepted). Empty in the answer to
	// Submit and Cancel.
	State string `json:"state,omitempty"`
}

// problem is the desk's refusal body.
type problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}
