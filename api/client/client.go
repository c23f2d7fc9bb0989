// Package client is a Go client of demo-api that retries its idempotent
// requests safely (the create, the cancel, or an Intent of the caller's
// own), keeping the client's half of the contract:
//
//   - one key per intent, made before the first attempt; every attempt
//     sends that key and the same bytes;
//   - one time budget per intent (5 s by default), a timeout per attempt;
//   - jittered exponential backoff, never shortened to fit the budget, and
//     a server's Retry-After honoured as far as the budget allows;
//   - X-Client-Attempt: n and Prefer: wait on each attempt;
//   - no definite answer within the budget: *OutcomeUnknownError (ask
//     Resolve, never send again), or *RateLimitedError when every attempt
//     got 429 (nothing stored: send again after Retry-After).
//
// Retried with the same key and body: transport errors and timeouts, 409
// operation_in_progress, 429, 500 (the server released the claim), 502,
// 503 and 504; any other 4xx is definite.
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
)

// The operations' names on the server, which scope their keys.
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

// Intent is one request the caller means to happen once, and the key every
// attempt carries; NewIntent and NewCancelIntent fill it in.
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
// key and no body: the request it names is its payload.
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

// ProblemError is a definite refusal: a 4xx the client does not retry.
type ProblemError struct {
	Key    string
	Status int
	Code   string // the problem's machine code, e.g. key_payload_mismatch
	Detail string
}

func (e *ProblemError) Error() string {
	return fmt.Sprintf("client: refused: %d %s: %s", e.Status, e.Code, e.Detail)
}

// OutcomeUnknownError is a budget spent with no definite answer: the request
// may have run. Ask Resolve(Operation, Key).
type OutcomeUnknownError struct {
	Operation string
	Key       string
	Attempts  int
	Last      string // what the last attempt saw
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("client: outcome unknown for %s key %s after %d attempts (last: %s): resolve the key", e.Operation, e.Key, e.Attempts, e.Last)
}

// RateLimitedError is a budget spent on 429s only: nothing was stored. Send
// the intent again after RetryAfter.
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

// ErrContractBroken wraps an answer that breaks the contract (a 201 without
// a requestId); it is not retried.
var ErrContractBroken = errors.New("client: the server broke the contract")

// minAttempt is the least time left worth an attempt.
const minAttempt = 250 * time.Millisecond

// nextWait decides the wait before the next attempt, with left of the
// budget, and whether there is one. A longer Retry-After is honoured, but
// leaves a whole last attempt (the attempt timeout, or half of what is left).
func nextWait(backoff, retryAfter, left, attemptTimeout time.Duration) (time.Duration, bool) {
	wait := backoff
	if retryAfter > wait {
		wait = max(backoff, min(retryAfter, left-min(attemptTimeout, left/2)))
	}
	return wait, left-wait >= minAttempt
}

// Send sends the intent until it gets a definite answer or its budget runs
// out. Errors: *ProblemError, *OutcomeUnknownError, *RateLimitedError,
// ErrContractBroken, ctx's error, or one naming what the intent lacks.
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
	last, limited, retryAfter := "", true, time.Duration(0) // limited: every attempt got 429
	spent := func(attempts int) error {
		if limited && attempts > 0 {
			return &RateLimitedError{Operation: it.Operation, Key: it.Key, Attempts: attempts, RetryAfter: retryAfter}
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
		var err error
		switch {
		case a.result != nil:
			a.Decision = "done"
			a.result.Attempts = n
		case a.refusal != nil:
			a.Decision, err = "stop: a definite answer, not retried", a.refusal
		case errors.Is(a.Err, ErrContractBroken):
			a.Decision, err = "stop: not retried, the server would answer the same", a.Err
		case ctx.Err() != nil:
			a.Decision, err = "stop: "+ctx.Err().Error(), ctx.Err()
		default:
			last = strings.TrimSpace(strconv.Itoa(a.Status) + " " + a.code)
			if a.Err != nil {
				last = a.Err.Error()
			}
			limited = limited && a.Err == nil && a.Status == http.StatusTooManyRequests
			retryAfter = max(a.retryAfter, time.Second)
			wait, again := nextWait(bo.NextBackOff(), a.retryAfter, time.Until(deadline), c.cfg.AttemptTimeout)
			if again {
				a.Decision, a.Wait = "retry in "+wait.Round(time.Millisecond).String(), wait
			} else {
				a.Decision, err = "give up: budget spent", spent(n)
			}
		}
		if c.cfg.OnAttempt != nil {
			c.cfg.OnAttempt(a.Attempt)
		}
		switch {
		case a.result != nil:
			return *a.result, nil
		case err != nil:
			return Result{}, err
		}
		select {
		case <-time.After(a.Wait):
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
}

// attemptResult is one attempt and what it decided.
type attemptResult struct {
	Attempt
	result     *Result
	refusal    *ProblemError
	retryAfter time.Duration
	code       string
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
	req.Header.Set("Idempotency-Key", it.Key)
	req.Header.Set("X-Client-Attempt", strconv.Itoa(n))
	// Without GetBody (and with a body it cannot rewind) the transport never
	// resends on its own, as it would a request with an Idempotency-Key.
	req.GetBody = nil
	if len(it.Body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	} else {
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
	inProgress := resp.StatusCode == http.StatusConflict && p.Code == "operation_in_progress"
	if !inProgress && !slices.Contains(retried, resp.StatusCode) {
		a.refusal = &ProblemError{Key: it.Key, Status: resp.StatusCode, Code: p.Code, Detail: p.Detail}
	}
	return a
}

// retried are the statuses sent again, beside a 409 operation_in_progress:
// nothing ran (429, 503) or was kept (500), or a proxy failed (502, 504).
var retried = []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
	http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// Outcome is what the server knows of a key.
type Outcome struct {
	Key                   string `json:"-"`
	State                 string `json:"state"`                 // "completed", "in_progress", or "unknown" (never seen, or expired)
	Status                int    `json:"status"`                // when completed: the stored status
	ResultID              string `json:"resultId"`              // and the id of what it created
	LeaseRemainingSeconds int    `json:"leaseRemainingSeconds"` // when in progress: left on the owner's lease
}

// Resolve asks the server what became of key of operation, never sending
// the request, within ctx's deadline or else the attempt timeout. Errors:
// ErrContractBroken, ctx's error, a transport error, or an unexpected status.
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
