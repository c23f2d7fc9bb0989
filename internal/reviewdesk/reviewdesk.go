// Package reviewdesk is the client of the review desk provider: a call is
// accepted, refused, or unclear (ask before sending again).
package reviewdesk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ErrNotFound is a lookup's answer when the desk never accepted the key.
var ErrNotFound = errors.New("reviewdesk: the provider holds nothing under this key")

// RefusedError is a definite refusal of Submit or Cancel: a 4xx other than
// 408, 409, 425 and 429.
type RefusedError struct {
	Status       int
	Code, Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("reviewdesk: refused (%d %s): %s", e.Status, e.Code, e.Detail)
}

// UnclearError is any other failure (a timeout, a broken connection, a 5xx,
// a 429): the call may or may not have been accepted.
type UnclearError struct {
	Op  string // submit, status, cancel, cancel_status, or decode (an answer that is not a receipt)
	Err error
}

func (e *UnclearError) Error() string {
	return "reviewdesk: " + e.Op + ": outcome unclear: " + e.Err.Error()
}
func (e *UnclearError) Unwrap() error { return e.Err }

// maxAnswer bounds what the client reads of an answer.
const maxAnswer = 64 << 10

// Client calls one review desk. Each call's deadline is its ctx's.
type Client struct {
	base string
	hc   *http.Client
}

// New returns a client of the desk at baseURL; hc nil is http.DefaultClient.
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

type accountKey struct{}

// WithAccount returns ctx for calls made for account, which each names to
// the desk (AccountHeader).
func WithAccount(ctx context.Context, account string) context.Context {
	return context.WithValue(ctx, accountKey{}, account)
}

// Submit sends s under key, the same for every attempt; nil is accepted.
// Errors: *RefusedError, *UnclearError (ask Status before sending again).
func (c *Client) Submit(ctx context.Context, key string, s Submission) (Receipt, error) {
	body, _ := json.Marshal(s)
	return c.exchange(ctx, "submit", http.MethodPost, SubmitPath, key, body)
}

// Cancel cancels the submission under submissionKey, under key, even before
// it arrives; nil is accepted. Errors: *RefusedError, *UnclearError (ask
// CancelStatus before sending again).
func (c *Client) Cancel(ctx context.Context, key, submissionKey string) (Receipt, error) {
	return c.exchange(ctx, "cancel", http.MethodPost, fmt.Sprintf(CancelPath, url.PathEscape(submissionKey)), key, []byte("{}"))
}

// Status asks what became of the submission under key. Errors: ErrNotFound
// (sending is safe), *UnclearError.
func (c *Client) Status(ctx context.Context, key string) (Receipt, error) {
	return c.exchange(ctx, "status", http.MethodGet, SubmissionStatusPath+url.PathEscape(key), key, nil)
}

// CancelStatus is Status of the cancel under key.
func (c *Client) CancelStatus(ctx context.Context, key string) (Receipt, error) {
	return c.exchange(ctx, "cancel_status", http.MethodGet, CancelStatusPath+url.PathEscape(key), key, nil)
}

// exchange makes the call op under key once and tells its outcomes apart.
// Without GetBody the transport never resends a POST on its own.
func (c *Client) exchange(ctx context.Context, op, method, path, key string, body []byte) (Receipt, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return Receipt{}, err
	}
	post := method == http.MethodPost
	if post {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(IdempotencyKeyHeader, key)
		req.GetBody = nil
	}
	if a, _ := ctx.Value(accountKey{}).(string); a != "" {
		req.Header.Set(AccountHeader, a)
	}
	status, answer, err := c.call(req, op, key)
	switch {
	case err != nil:
		return Receipt{}, &UnclearError{Op: op, Err: err}
	case status == http.StatusOK || (post && status == http.StatusCreated):
		var r Receipt
		if err := json.Unmarshal(answer, &r); err != nil || r.Reference == "" {
			return Receipt{}, &UnclearError{Op: "decode", Err: fmt.Errorf("an answer that is not a receipt: %.100s", answer)}
		}
		return r, nil
	case !post && status == http.StatusNotFound:
		return Receipt{}, ErrNotFound
	case post && status >= 400 && status < 500 && !slices.Contains([]int{408, 409, 425, 429}, status): // a definite refusal
		var p problem
		_ = json.Unmarshal(answer, &p) // a body that is no problem leaves them empty
		return Receipt{}, &RefusedError{Status: status, Code: p.Code, Detail: p.Detail}
	}
	return Receipt{}, &UnclearError{Op: op, Err: fmt.Errorf("status %d", status)}
}
