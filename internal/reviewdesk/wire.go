package reviewdesk

import "time"

// The review desk's wire words: its routes, its headers and the JSON fields
// of what it takes and answers. They belong to the desk, the other system,
// not to this service: a rename of the example (demo requests, their
// cancel, into your own) must leave every string in this file as it is, as
// it must the test double that speaks them (testkit/deskdouble.go). They
// change only when the desk does.

// The desk's routes. A %s is a key, path-escaped; a path ending in / takes
// the key after it (a lookup).
const (
	submitPath           = "/v1/submissions"           // POST: Submit
	submissionStatusPath = "/v1/submissions/"          // GET: Status
	cancelPath           = "/v1/submissions/%s/cancel" // POST: Cancel, of the submission's key
	cancelStatusPath     = "/v1/cancels/"              // GET: CancelStatus
	reserveSlotPath      = "/v1/slots"                 // POST: ReserveSlot
	slotStatusPath       = "/v1/slots/"                // GET: SlotStatus
	releaseSlotPath      = "/v1/slots/%s/release"      // POST: ReleaseSlot, of the slot's key
	releaseStatusPath    = "/v1/releases/"             // GET: ReleaseStatus
	chargePath           = "/v1/charges"               // POST: Charge
	chargeStatusPath     = "/v1/charges/"              // GET: ChargeStatus
	refundPath           = "/v1/charges/%s/refund"     // POST: Refund, of the charge's key
	refundStatusPath     = "/v1/refunds/"              // GET: RefundStatus
	statsPath            = "/v1/stats"                 // GET: Stats
	faultsPath           = "/v1/faults"                // PUT: SetFaults
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

// Slot is a reservation of an express slot for an account.
type Slot struct {
	RequestID string `json:"requestId"`
	Account   string `json:"account"`
}

// Charge is a debit of Amount (1 to 1000) of the account's credit, for the
// slot reserved under SlotKey for the same account.
type Charge struct {
	RequestID string `json:"requestId"`
	Account   string `json:"account"`
	Amount    int    `json:"amount"`
	SlotKey   string `json:"slotKey"`
}

// Receipt is the desk's record of an accepted call under its key: a
// submission, a cancel, a slot, a release, a charge or a refund.
type Receipt struct {
	Key        string    `json:"key"`
	Reference  string    `json:"reference"`
	AcceptedAt time.Time `json:"acceptedAt"`
	// State is what became of it, as the lookups answer it (a submission:
	// accepted or cancelled; a slot: held, charged or released; a charge:
	// charged or refunded; a cancel, a release or a refund: accepted). The
	// desk's answer to a slot, release, charge or refund carries it too:
	// the current one, for a repeat. Empty in the answer to Submit and
	// Cancel.
	State string `json:"state,omitempty"`
}

// Stats are the desk's counts, for tests and chaos checks.
type Stats struct {
	Submissions int        `json:"submissions"`
	Cancels     int        `json:"cancels"`
	Slots       SlotCounts `json:"slots"`
	Releases    int        `json:"releases"`
	Charges     int        `json:"charges"`
	Refunds     int        `json:"refunds"`
	// Credit is each account's credit, of the accounts charged so far.
	Credit map[string]int `json:"credit"`
}

// SlotCounts are the desk's slots by state.
type SlotCounts struct {
	Held     int `json:"held"`
	Charged  int `json:"charged"`
	Released int `json:"released"`
}

// problem is the desk's refusal body.
type problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}
