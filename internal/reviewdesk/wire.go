package reviewdesk

import "time"

// The review desk's wire words: they belong to the desk, and a rename of the
// example resource leaves them as they are, but for the submission's
// requestId, which names the resource.

// The desk's resources, as its routes and its fault knobs name them.
const (
	Submissions = "submissions"
	Cancels     = "cancels"
)

// The desk's routes: %s, or what follows a final /, is a key, path-escaped.
const (
	SubmitPath           = "/v1/" + Submissions      // POST: Submit
	SubmissionStatusPath = SubmitPath + "/"          // GET: Status
	CancelPath           = SubmitPath + "/%s/cancel" // POST: Cancel, of the submission's key
	CancelStatusPath     = "/v1/" + Cancels + "/"    // GET: CancelStatus
)

// IdempotencyKeyHeader carries the sender's key on every keyed call;
// ReplayedHeader marks the desk's answer to a key it held already.
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	ReplayedHeader       = "Idempotent-Replayed"
)

// AccountHeader names, on a call, the account it is made for.
const AccountHeader = "Desk-Account"

// Submission is what the service hands the desk: a demo request.
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

// Lookup is the desk's answer to a lookup (Status, CancelStatus): the
// receipt, with its state; a cancel's names its submission, a cancelled
// submission's its cancel.
type Lookup struct {
	Receipt
	SubmissionKey   string `json:"submissionKey,omitempty"`
	CancelReference string `json:"cancelReference,omitempty"`
}
