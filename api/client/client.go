// Package client is a Go client of demo-api that retries its idempotent
// requests safely: the create, the cancel, and any other operation that
// takes an Idempotency-Key (an Intent of its own, sent with Send). It keeps
// the client's half of the contract:
//
//   - one key per intent: an Intent is one request the caller means to
//     happen once (its method, path and body bytes), and its key (a UUID)
//     is made once, before the first attempt; every attempt sends that key
//     and the same bytes. A changed payload is a new intent with a new key;
//   - one total time budget per intent (5 s by default), not a count of
//     attempts, with a timeout per attempt inside it;
//   - bounded, jittered exponential backoff between attempts, never
//     shortened to fit the budget: no attempt starts with less than 250 ms
//     of it left; a server's Retry-After is honoured as far as the budget
//     allows;
//   - X-Client-Attempt: n on each attempt, and Prefer: wait, so that a
//     retry that finds the first attempt still running waits for its answer;
//   - when the budget runs out with no definite answer, an
//     *OutcomeUnknownError with the key and the operation: Resolve then
//     asks the server what became of the key, and never sends again;
//   - when every attempt was answered 429 (a new key over the bound, refused
//     before anything ran), a *RateLimitedError instead: nothing was stored,
//     and the intent may be sent again, with its key, after Retry-After.
//
// What is retried, with the same key and body: transport errors and
// timeouts, 409 operation_in_progress, 429, 500, 502, 503 and 504. Never
// retried: 400, 401, 404, 413, 415, 422 and any other 4xx — the answer is
// definite. 500 is retried on purpose: demo-api answers 500 only when the
// work failed after the claim in a way it did not foresee, and it releases
// the claim (storing nothing) before it answers, so the same key runs again
// as a first request.
package client

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
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
)

// The operations' names on the server: a key is scoped to its operation,
// and the outcome route asks about a key of one.
const (
	OperationCreate = "demo-requests.create"
	OperationCancel = "demo-requests.cancel"
)

// Config configures a Client. BaseURL and Token are required.
type Config struct {
	BaseURL        string        // e.g. http://localhost:8080
	Token          string        // the bearer token
	HTTPClient     *http.Client  // default: a client of its own; its Timeout is not used
	Budget         time.Duration // the total time one intent may take (default 5 s)
	AttemptTimeout time.Duration // bounds one attempt (default 2 s, never past the budget)
	OnAttempt      func(Attempt) // if set, told about every attempt once it is decided
}

// Client sends idempotent requests to one server.
type Client struct {
	cfg Config
	hc  *http.Client
}

// New returns a client, or an error naming what cfg lacks.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Token == "" {
		return nil, errors.New("client: BaseURL and Token are required")
	}
	if cfg.Budget <= 0 {
		cfg.Budget = 5 * time.Second
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 2 * time.Second
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Client{cfg: cfg, hc: cmp.Or(cfg.HTTPClient, &http.Client{})}, nil
}

// CreateInput is the body of a create.
type CreateInput struct {
	Topic string `json:"topic"`
	Note  string `json:"note,omitempty"`
}

// DemoRequest is what the server answers a create and a cancel with.
type DemoRequest struct {
	RequestID   string     `json:"requestId"`
	State       string     `json:"state"`
	Topic       string     `json:"topic"`
	Note        string     `json:"note"`
	CreatedAt   time.Time  `json:"createdAt"`
	CancelledAt *time.Time `json:"cancelledAt,omitempty"`
}

// Intent is one idempotent request the caller means to happen once: what
// it sends, and the key every attempt carries. Operation, Method, Path and
// Key are required; NewIntent and NewCancelIntent fill them in.
type Intent struct {
	Operation string // the server's name for it, for the outcome route
	Method    string // http.MethodPost
	Path      string // e.g. /v1/demo-requests
	Key       string
	Body      []byte      // the exact bytes every attempt sends; none for a cancel
	Header    http.Header // extra headers every attempt sends (say a workshop knob)
}

// NewIntent makes the intent of a create of in, with a new key.
func NewIntent(in CreateInput) (*Intent, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	return newIntent(OperationCreate, "/v1/demo-requests", body), nil
}

// NewCancelIntent makes the intent of a cancel of requestID, with a new
// key. A cancel sends no body: the request it names is its payload.
func NewCancelIntent(requestID string) (*Intent, error) {
	if requestID == "" {
		return nil, errors.New("client: a cancel needs the requestId")
	}
	return newIntent(OperationCancel, "/v1/demo-requests/"+url.PathEscape(requestID)+"/cancel", nil), nil
}

func newIntent(operation, path string, body []byte) *Intent {
	return &Intent{Operation: operation, Method: http.MethodPost, Path: path,
		Key: uuid.NewString(), Body: body, Header: http.Header{}}
}

// Result is the definite success of an intent.
type Result struct {
	Key      string
	Status   int  // 201 for a create, 200 for a cancel
	Replayed bool // the answer was the stored one (Idempotent-Replayed)
	Waited   bool // the server waited for an earlier attempt (Preference-Applied)
	Request  DemoRequest
	Body     []byte // the answer's bytes (a replay's are the first answer's)
	Attempts int
}

// Attempt is one attempt as the OnAttempt hook sees it.
type Attempt struct {
	Intent   string // the key
	N        int    // 1, 2, …
	Status   int    // 0 when the attempt got no answer
	Err      error  // the transport error or timeout, if any
	Elapsed  time.Duration
	Decision string // what the client does next
	Wait     time.Duration
}

// ProblemError is a definite refusal: a 4xx the client does not retry. The
// same intent would get the same answer.
type ProblemError struct {
	Key    string
	Status int
	Code   string // the problem's machine code, e.g. key_payload_mismatch
	Detail string
}

func (e *ProblemError) Error() string {
	return fmt.Sprintf("client: refused: %d %s: %s", e.Status, e.Code, e.Detail)
}

// OutcomeUnknownError is returned when the budget ran out with no definite
// answer: the request may or may not have run. Ask with
// Resolve(Operation, Key); do not send it again with a new key.
type OutcomeUnknownError struct {
	Operation string
	Key       string
	Attempts  int
	Last      string // what the last attempt saw
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("client: outcome unknown for %s key %s after %d attempts (last: %s): resolve the key", e.Operation, e.Key, e.Attempts, e.Last)
}

// RateLimitedError is returned when the budget ran out and every attempt
// was answered 429: the server refused each before it ran anything, so
// nothing was stored under the key. Send the intent again (the same key is
// safe) after RetryAfter, the server's Retry-After on the last answer.
type RateLimitedError struct {
	Operation  string
	Key        string
	Attempts   int
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("client: rate limited: %s key %s refused with 429 on all %d attempts, nothing stored: send again after %s",
		e.Operation, e.Key, e.Attempts, e.RetryAfter)
}

// ErrContractBroken is wrapped by the error of an answer that breaks the
// server's contract, such as a 201 whose body has no requestId. It is not
// retried: the server would send it again.
var ErrContractBroken = errors.New("client: the server broke the contract")

// Create makes a new intent of in and sends it. Result.Request is the
// created request. Errors: those of Send.
func (c *Client) Create(ctx context.Context, in CreateInput) (Result, error) {
	it, err := NewIntent(in)
	if err != nil {
		return Result{}, err
	}
	return c.Send(ctx, it)
}

// Cancel makes a new intent of the cancel of requestID and sends it.
// Result.Request is the cancelled request. Errors: those of Send; a
// *ProblemError of 404 not_found (no such request of the caller's), 422
// request_not_cancellable (cancelled already, under another key, or
// expedited) or 422 request_being_expedited (its expedite is unfinished).
func (c *Client) Cancel(ctx context.Context, requestID string) (Result, error) {
	it, err := NewCancelIntent(requestID)
	if err != nil {
		return Result{}, err
	}
	return c.Send(ctx, it)
}

// minAttempt is the least time left worth starting an attempt with: a
// round trip and a little work, on a slow network.
const minAttempt = 250 * time.Millisecond

// nextWait decides the wait before the next attempt, with left of the
// budget after the last one, and whether that attempt is made at all. The
// wait is the backoff's, or the server's Retry-After when longer. The
// backoff's wait is never shortened to squeeze in one more attempt: when
// it would leave that attempt less than minAttempt, there is none, so the
// end of a budget is no burst of attempts against a server that is down.
// A Retry-After past the budget is shortened (never below the backoff's
// wait) to leave a whole last attempt: the attempt timeout, or half of
// what is left.
func nextWait(backoff, retryAfter, left, attemptTimeout time.Duration) (time.Duration, bool) {
	wait := backoff
	if retryAfter > wait {
		wait = max(backoff, min(retryAfter, left-min(attemptTimeout, left/2)))
	}
	return wait, left-wait >= minAttempt
}

// Send sends the intent until it gets a definite answer or its budget runs
// out. Every operation of demo-api answers a 2xx whose body has a
// requestId.
//
// Errors: *ProblemError (definite refusal), *OutcomeUnknownError (budget
// spent), *RateLimitedError (budget spent on 429s only), ErrContractBroken
// (a 2xx without a requestId), ctx's error, or one that names what an
// incomplete intent lacks.
func (c *Client) Send(ctx context.Context, it *Intent) (Result, error) {
	if it.Operation == "" || it.Method == "" || it.Path == "" || it.Key == "" {
		return Result{}, errors.New("client: an intent needs its Operation, Method, Path and Key")
	}
	start := time.Now()
	deadline := start.Add(c.cfg.Budget)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	bo := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: time.Second}
	bo.Reset()
	last := ""
	limited := rateLimitRun{}
	spent := func(attempts int) error {
		if limited.all && attempts > 0 {
			return &RateLimitedError{Operation: it.Operation, Key: it.Key, Attempts: attempts, RetryAfter: limited.retryAfter}
		}
		return &OutcomeUnknownError{Operation: it.Operation, Key: it.Key, Attempts: attempts, Last: last}
	}
	for n := 1; ; n++ {
		left := time.Until(deadline)
		if left < minAttempt {
			return Result{}, spent(n - 1)
		}
		a := c.attempt(ctx, it, n, min(left, c.cfg.AttemptTimeout))
		a.Elapsed = time.Since(start)
		if a.result != nil {
			a.Decision = "done"
			c.report(a.Attempt)
			a.result.Attempts = n
			return *a.result, nil
		}
		if a.refusal != nil {
			a.Decision = "stop: a definite answer, not retried"
			c.report(a.Attempt)
			return Result{}, a.refusal
		}
		if errors.Is(a.Err, ErrContractBroken) {
			a.Decision = "stop: not retried, the server would answer the same"
			c.report(a.Attempt)
			return Result{}, a.Err
		}
		if err := ctx.Err(); err != nil {
			a.Decision = "stop: " + err.Error()
			c.report(a.Attempt)
			return Result{}, err
		}
		last = a.seen()
		limited.add(n, a)
		wait, again := nextWait(bo.NextBackOff(), a.retryAfter, time.Until(deadline), c.cfg.AttemptTimeout)
		if !again {
			a.Decision = "give up: budget spent"
			c.report(a.Attempt)
			return Result{}, spent(n)
		}
		a.Decision, a.Wait = "retry in "+wait.Round(time.Millisecond).String(), wait
		c.report(a.Attempt)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Result{}, ctx.Err()
		}
	}
}

// rateLimitRun follows whether every attempt so far was answered 429, and
// the last one's Retry-After.
type rateLimitRun struct {
	all        bool
	retryAfter time.Duration
}

func (r *rateLimitRun) add(n int, a attemptResult) {
	r.all = (n == 1 || r.all) && a.Err == nil && a.Status == http.StatusTooManyRequests
	r.retryAfter = max(a.retryAfter, time.Second)
}

// attemptResult is one attempt and what it decided.
type attemptResult struct {
	Attempt
	result     *Result
	refusal    *ProblemError
	retryAfter time.Duration
	code       string
}

func (a attemptResult) seen() string {
	switch {
	case a.Err != nil:
		return a.Err.Error()
	case a.code != "":
		return strconv.Itoa(a.Status) + " " + a.code
	}
	return strconv.Itoa(a.Status)
}

// maxAnswer bounds what the client reads of an answer.
const maxAnswer = 1 << 20

func (c *Client) attempt(ctx context.Context, it *Intent, n int, timeout time.Duration) attemptResult {
	a := attemptResult{Attempt: Attempt{Intent: it.Key, N: n}}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, it.Method, c.cfg.BaseURL+it.Path, bytes.NewReader(it.Body))
	if err != nil {
		a.Err = err
		return a
	}
	for k, v := range it.Header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	if len(it.Body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", it.Key)
	req.Header.Set("X-Client-Attempt", strconv.Itoa(n))
	// Without GetBody the transport cannot resend on its own when a reused
	// connection breaks, as it would for a request with an Idempotency-Key:
	// every attempt is this loop's, numbered and within the budget.
	req.GetBody = nil
	if len(it.Body) == 0 {
		// The transport resends a request without a body (http.NoBody)
		// all the same: this one gets an empty body it cannot rewind,
		// which goes out as an empty chunked body.
		req.Body = io.NopCloser(bytes.NewReader(nil))
	}
	// Wait for a running first attempt rather than take a 409, as long as
	// the answer can still arrive within this attempt.
	if w := int((timeout - 500*time.Millisecond) / time.Second); w >= 1 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(w))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		a.Err = err
		return a
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	a.Status = resp.StatusCode
	if err != nil {
		a.Err = fmt.Errorf("read the answer: %w", err)
		return a
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		r := Result{Key: it.Key, Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
			Waited: resp.Header.Get("Preference-Applied") == "wait", Body: body}
		if err := json.Unmarshal(body, &r.Request); err != nil {
			a.Err = fmt.Errorf("decode the answer: %w", err)
			return a
		}
		if r.Request.RequestID == "" {
			a.Err = fmt.Errorf("%w: a %d without a requestId for key %s: %.200s", ErrContractBroken, resp.StatusCode, it.Key, body)
			return a
		}
		a.result = &r
		return a
	}
	var p struct{ Code, Detail string }
	_ = json.Unmarshal(body, &p) // a body that is no problem leaves the code empty
	a.code = p.Code
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	if !Retryable(resp.StatusCode, p.Code) {
		a.refusal = &ProblemError{Key: it.Key, Status: resp.StatusCode, Code: p.Code, Detail: p.Detail}
	}
	return a
}

// Retryable reports whether an answer with status and problem code is
// worth sending again with the same key: the request did not run (409
// operation_in_progress, 429, 503), ran and was released (500), or a proxy
// could not reach the server (502, 504).
func Retryable(status int, code string) bool {
	switch status {
	case http.StatusConflict:
		return code == "operation_in_progress"
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (c *Client) report(a Attempt) {
	if c.cfg.OnAttempt != nil {
		c.cfg.OnAttempt(a)
	}
}

// Outcome is what the server knows of a key.
type Outcome struct {
	Key                   string `json:"-"`
	State                 string `json:"state"`                 // "completed", "in_progress", or "unknown" (never seen, or expired)
	Status                int    `json:"status"`                // when completed: the stored status
	ResultID              string `json:"resultId"`              // and the id of what it created
	LeaseRemainingSeconds int    `json:"leaseRemainingSeconds"` // when in progress: left on the owner's lease
}

// Resolve asks the server what became of key of operation, for an intent
// whose outcome is unknown. It never sends the request: when the answer is
// "unknown", the request did not run under this key (or its record
// expired), and the caller decides whether to make a new intent. It ends by
// ctx's deadline, or after the attempt timeout when ctx has none.
//
// Errors: ErrContractBroken (a 200 without a known state), ctx's error, a
// transport error, or one that names an unexpected status.
func (c *Client) Resolve(ctx context.Context, operation, key string) (Outcome, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		defer cancel()
	}
	u := c.cfg.BaseURL + "/v1/idempotency-keys/" + url.PathEscape(key) + "?operation=" + url.QueryEscape(operation)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Outcome{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return Outcome{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return Outcome{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		o := Outcome{Key: key}
		if err := json.Unmarshal(body, &o); err != nil {
			return Outcome{}, fmt.Errorf("client: decode the outcome: %w", err)
		}
		if o.State != "completed" && o.State != "in_progress" {
			return Outcome{}, fmt.Errorf("%w: an outcome of state %q: %.200s", ErrContractBroken, o.State, body)
		}
		return o, nil
	case http.StatusNotFound:
		return Outcome{Key: key, State: "unknown"}, nil
	}
	return Outcome{}, fmt.Errorf("client: resolve: status %d: %.200s", resp.StatusCode, body)
}
