// Package deskclient is the demo's client of the review desk: the root's
// client (package reviewdesk: submissions and their cancels, which the
// outbox's dispatcher sends) and the calls only the demo makes: the
// resources of the expedite, an operation of several steps — a slot
// reserved for an account (ReserveSlot), a charge of the account's credit
// that uses it (Charge), and their compensations (ReleaseSlot, Refund) —
// and the desk's fault knobs and counts. Every resource call is a keyed
// call with the root client's three outcomes (a receipt, a
// *reviewdesk.RefusedError, a *reviewdesk.UnclearError), and a lookup by
// its key that answers reviewdesk.ErrNotFound for a key the desk never
// accepted. The stand-in desk (package provider) takes the same Slot and
// Charge.
package deskclient

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tracing"
)

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

// Stats are the desk's counts, as GET /v1/stats answers them, for tests
// and chaos checks.
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

// ErrFaultsDisabled is SetFaults's answer from a desk started without its
// fault knobs.
var ErrFaultsDisabled = errors.New("reviewdesk: the desk refuses its fault knobs (PROVIDER_FAULTS is off)")

// Client calls one review desk: the root client's calls and the demo's.
// Each call's deadline is its ctx's.
type Client struct {
	*reviewdesk.Client
	base string
	hc   *http.Client
}

// New returns a client of the desk at baseURL (e.g. http://127.0.0.1:8090);
// hc nil means http.DefaultClient.
func New(baseURL string, hc *http.Client) *Client {
	return &Client{Client: reviewdesk.New(baseURL, hc), base: strings.TrimRight(baseURL, "/"), hc: cmp.Or(hc, http.DefaultClient)}
}

// ReserveSlot reserves an express slot for s.Account under key, the
// sender's idempotency key for this slot: the same for every attempt. The
// slot is held (State "held") until the desk's hold time passes; then, if
// no charge took it, the desk releases it. A nil error means accepted, the
// first time or again; a repeat answers the slot's current state.
//
// Errors: *RefusedError (key_payload_mismatch: the key was used for
// another slot; slot_refused: the desk refuses new slots now),
// *UnclearError (ask SlotStatus before sending again).
func (c *Client) ReserveSlot(ctx context.Context, key string, s Slot) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "reserve_slot", "/v1/slots", key, s)
}

// SlotStatus asks what became of the slot under key (ReserveSlot's key):
// State "held", "charged" or "released".
//
// Errors: ErrNotFound (the desk never accepted it: sending is safe),
// *UnclearError.
func (c *Client) SlotStatus(ctx context.Context, key string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "slot_status", "/v1/slots/", key, nil)
}

// ReleaseSlot asks the desk to release the slot under slotKey, with key,
// the sender's idempotency key for this release: the same for every
// attempt. The desk keeps a release that comes before its slot, and the
// slot is then released from the start. A nil error means accepted, the
// first time or again.
//
// Errors: *RefusedError (slot_charged: the slot was charged, refund the
// charge instead; already_released: another key released this slot;
// key_payload_mismatch: the key released another slot; release_refused),
// *UnclearError (ask ReleaseStatus before sending again).
func (c *Client) ReleaseSlot(ctx context.Context, key, slotKey string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "release_slot", "/v1/slots/"+url.PathEscape(slotKey)+"/release", key, struct{}{})
}

// ReleaseStatus asks what became of the release under key (ReleaseSlot's
// key).
//
// Errors: ErrNotFound (the desk never accepted it: sending is safe),
// *UnclearError.
func (c *Client) ReleaseStatus(ctx context.Context, key string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "release_status", "/v1/releases/", key, nil)
}

// Charge debits ch.Amount of ch.Account's credit for the slot under
// ch.SlotKey, under key, the sender's idempotency key for this charge: the
// same for every attempt. The desk debits the account and marks the slot
// charged in one transaction, once. A nil error means accepted, the first
// time or again (State "charged", or "refunded" once a refund is kept).
//
// Errors: *RefusedError (nothing was charged: slot_not_held: no slot is
// held under SlotKey for the account, it was released, charged or its hold
// ended; insufficient_credit; key_payload_mismatch: the key was used for
// another charge; charge_refused), *UnclearError (ask ChargeStatus before
// sending again).
func (c *Client) Charge(ctx context.Context, key string, ch Charge) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "charge", "/v1/charges", key, ch)
}

// ChargeStatus asks what became of the charge under key (Charge's key):
// State "charged" or "refunded".
//
// Errors: ErrNotFound (the desk never accepted it: sending is safe),
// *UnclearError.
func (c *Client) ChargeStatus(ctx context.Context, key string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "charge_status", "/v1/charges/", key, nil)
}

// Refund asks the desk to give back the amount of the charge under
// chargeKey, with key, the sender's idempotency key for this refund: the
// same for every attempt. The amount goes back once. The desk keeps a
// refund that comes before its charge, and the charge is then refunded
// from the start (its slot charged, the credit left as it was). A nil
// error means accepted, the first time or again.
//
// Errors: *RefusedError (already_refunded: another key refunded this
// charge; key_payload_mismatch: the key refunded another charge;
// refund_refused), *UnclearError (ask RefundStatus before sending again).
func (c *Client) Refund(ctx context.Context, key, chargeKey string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "refund", "/v1/charges/"+url.PathEscape(chargeKey)+"/refund", key, struct{}{})
}

// RefundStatus asks what became of the refund under key (Refund's key).
//
// Errors: ErrNotFound (the desk never accepted it: sending is safe),
// *UnclearError.
func (c *Client) RefundStatus(ctx context.Context, key string) (reviewdesk.Receipt, error) {
	return c.keyed(ctx, "refund_status", "/v1/refunds/", key, nil)
}

// Stats reads the desk's counts, in one snapshot of its database. The
// desk's fault knobs do not apply to it.
//
// Errors: why the desk did not answer them.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	status, answer, err := c.do(ctx, "", http.MethodGet, "/v1/stats", "", nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("status %d: %.200s", status, answer)
	}
	if err == nil {
		err = json.Unmarshal(answer, &st)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("reviewdesk: stats: %w", err)
	}
	return st, nil
}

// SetFaults replaces the desk's fault knobs with faults, a JSON object such
// as {"down":true}; {} clears them; with "account" only that account's are
// replaced (WithAccount). Workshops use it.
//
// Errors: ErrFaultsDisabled, *RefusedError (the desk refused these faults,
// such as a delay that is not a duration: sending them again cannot
// succeed), or why the desk did not take them.
func (c *Client) SetFaults(ctx context.Context, faults []byte) error {
	status, answer, err := c.do(ctx, "", http.MethodPut, "/v1/faults", "", faults)
	switch {
	case err != nil:
		return fmt.Errorf("reviewdesk: set faults: %w", err)
	case status == http.StatusOK:
		return nil
	case status == http.StatusForbidden:
		return ErrFaultsDisabled
	case refused(status):
		return refusal(status, answer)
	}
	return fmt.Errorf("reviewdesk: set faults: status %d: %.200s", status, answer)
}

// accountKey carries the account a call is made for.
type accountKey struct{}

// WithAccount returns ctx for calls made for account, the actor whose
// request the call carries: every call of this client and of the root's
// (reviewdesk.WithAccount) under it names the account to the desk, which
// aims that account's faults at it.
func WithAccount(ctx context.Context, account string) context.Context {
	return context.WithValue(reviewdesk.WithAccount(ctx, account), accountKey{}, account)
}

// keyed makes the keyed call op under key: a POST of body, as JSON, to
// path; or, with a nil body, the lookup of what the desk holds under key, a
// GET of path+key. It tells apart the root client's three outcomes as that
// client does.
func (c *Client) keyed(ctx context.Context, op, path, key string, body any) (reviewdesk.Receipt, error) {
	method, payload := http.MethodGet, []byte(nil)
	if body == nil {
		path += url.PathEscape(key)
	} else {
		method = http.MethodPost
		payload, _ = json.Marshal(body)
	}
	status, answer, err := c.do(ctx, op, method, path, key, payload)
	var r reviewdesk.Receipt
	switch {
	case err != nil:
	case status == http.StatusOK || body != nil && status == http.StatusCreated:
		if json.Unmarshal(answer, &r) == nil && r.Reference != "" {
			return r, nil
		}
		op, err = "decode", fmt.Errorf("an answer that is not a receipt: %.100s", answer)
	case body == nil && status == http.StatusNotFound:
		return reviewdesk.Receipt{}, reviewdesk.ErrNotFound
	case body != nil && refused(status):
		return reviewdesk.Receipt{}, refusal(status, answer)
	default:
		err = fmt.Errorf("status %d", status)
	}
	return reviewdesk.Receipt{}, &reviewdesk.UnclearError{Op: op, Err: err}
}

// do sends one request and reads its answer. A request with a body carries
// key as its Idempotency-Key, and no GetBody: the transport cannot resend
// it on its own when a reused connection breaks; each send is the caller's
// decision. A call op names ctx's account (WithAccount), and is traced when tracing is on (package tracing), as the root client's are: a
// client span "reviewdesk <op>" with the key and the desk's status, whose
// traceparent the request carries; an unclear call (no answer, or a 5xx)
// sets its status to error.
func (c *Client) do(ctx context.Context, op, method, path, key string, body []byte) (status int, answer []byte, err error) {
	if op != "" && tracing.On() {
		var span trace.Span
		ctx, span = tracing.Start(ctx, "reviewdesk "+op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("reviewdesk.key", key), attribute.String("http.request.method", method)))
		defer func() {
			switch {
			case err != nil:
				span.RecordError(err)
				span.SetStatus(codes.Error, "no answer")
			case status >= 500:
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			if status != 0 {
				span.SetAttributes(attribute.Int("http.response.status_code", status))
			}
			span.End()
		}()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.GetBody = nil
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
	}
	if a, _ := ctx.Value(accountKey{}).(string); a != "" && op != "" {
		req.Header.Set(reviewdesk.AccountHeader, a)
	}
	if op != "" && tracing.On() {
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, answer, err
}

// refused reports whether status is a definite refusal: a 4xx other than
// 408, 409, 425 and 429, which may pass.
func refused(status int) bool {
	return status >= 400 && status < 500 && status != 408 && status != 409 && status != 425 && status != 429
}

// refusal is the *reviewdesk.RefusedError of a refused answer.
func refusal(status int, answer []byte) error {
	var p struct{ Code, Detail string }
	json.Unmarshal(answer, &p)
	return &reviewdesk.RefusedError{Status: status, Code: p.Code, Detail: p.Detail}
}
