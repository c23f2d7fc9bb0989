package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/demo-api/demo-api/api/client"
)

// Exit codes of the commands.
const (
	ExitRefused     = 1 // a definite refusal (or a usage error)
	ExitUnknown     = 3 // the budget ran out: outcome unknown, resolve the key
	ExitRateLimited = 4 // every attempt was answered 429: nothing stored, send again after Retry-After
)

// ExitError carries the exit code a command wants (ExitCode).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

const sendUsage = `usage: demo-api send [flags]

Creates a demo request (or, with --cancel ID, cancels one) through the Go
client (api/client): one key for the intent, retries with that key within
the budget, one line per attempt.
Exit status: 0 done (created, cancelled, or replayed), 1 refused, 3 outcome
unknown (resolve the key with --resolve KEY --operation NAME), 4 rate
limited: every attempt was answered 429, nothing was stored, send again
(--key KEY) after the seconds it prints.
`

// Send is demo-api send.
func Send(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo-api send", flag.ContinueOnError)
	base := fs.String("base", "http://localhost:8080", "the API's base URL")
	token := fs.String("token", "dev-alice", "bearer token")
	key := fs.String("key", "", "reuse this idempotency key (default: a new one)")
	budget := fs.Duration("budget", 5*time.Second, "total time for the intent")
	attempt := fs.Duration("attempt-timeout", 2*time.Second, "time for one attempt")
	topic := fs.String("topic", "billing", "the request's topic")
	note := fs.String("note", "", "the request's note")
	cancel := fs.String("cancel", "", "cancel the request of this requestId instead of creating one")
	resolve := fs.String("resolve", "", "ask what became of this key instead of sending")
	operation := fs.String("operation", client.OperationCreate, "the operation of the --resolve key: "+client.OperationCreate+" or "+client.OperationCancel)
	header := http.Header{}
	fs.Func("header", "extra header 'Name: value' on every attempt, e.g. 'Workshop-Delay: 3s' (repeatable)", func(v string) error {
		name, value, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("want 'Name: value', got %q", v)
		}
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		return nil
	})
	if err := parseFlags(fs, args, sendUsage, stdout); err != nil {
		return err
	}
	c, err := client.New(client.Config{BaseURL: *base, Token: *token, Budget: *budget, AttemptTimeout: *attempt,
		OnAttempt: func(a client.Attempt) {
			seen := fmt.Sprint(a.Status)
			if a.Err != nil {
				seen = "no answer (" + shortErr(a.Err) + ")"
			}
			fmt.Fprintf(stdout, "attempt %d  %-32s %7s  %s\n", a.N, seen, a.Elapsed.Round(time.Millisecond), a.Decision)
		}})
	if err != nil {
		return &ExitError{ExitRefused, err}
	}
	if *resolve != "" {
		o, err := c.Resolve(ctx, *operation, *resolve)
		if err != nil {
			return err
		}
		switch o.State {
		case "completed":
			fmt.Fprintf(stdout, "key %s of %s: completed with %d, request %s\n", o.Key, *operation, o.Status, o.ResultID)
		case "in_progress":
			fmt.Fprintf(stdout, "key %s of %s: still in progress (lease %d s left): ask again later\n", o.Key, *operation, o.LeaseRemainingSeconds)
		default:
			fmt.Fprintf(stdout, "key %s of %s: never seen, or its record expired: nothing ran under this key\n", o.Key, *operation)
		}
		return nil
	}
	it, err := client.NewIntent(client.CreateInput{Topic: *topic, Note: *note})
	if *cancel != "" {
		it, err = client.NewCancelIntent(*cancel)
	}
	if err != nil {
		return err
	}
	if *key != "" {
		it.Key = *key
	}
	it.Header = header
	fmt.Fprintf(stdout, "intent: key %s, budget %s\n", it.Key, *budget)
	res, err := c.Send(ctx, it)
	var refused *client.ProblemError
	var unknown *client.OutcomeUnknownError
	var limited *client.RateLimitedError
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(stdout, "refused: %d %s: %s\n", refused.Status, refused.Code, refused.Detail)
		return &ExitError{ExitRefused, err}
	case errors.As(err, &unknown):
		fmt.Fprintf(stdout, "outcome unknown: the budget ran out. Ask, do not send again: demo-api send --resolve %s --operation %s\n", unknown.Key, unknown.Operation)
		return &ExitError{ExitUnknown, err}
	case errors.As(err, &limited):
		fmt.Fprintf(stdout, "rate limited: refused with 429 on all %d attempts (too many new keys from this actor), nothing stored. "+
			"Send again after %d s, with the same key: demo-api send --key %s …\n", limited.Attempts, int((limited.RetryAfter+time.Second-1)/time.Second), limited.Key)
		return &ExitError{ExitRateLimited, err}
	case err != nil:
		return err
	}
	how := "created"
	if *cancel != "" {
		how = "cancelled"
	}
	if res.Replayed {
		how = "replayed (this key's answer, stored the first time)"
	}
	fmt.Fprintf(stdout, "%s: request %s (%d) after %d attempt(s)\n", how, res.Request.RequestID, res.Status, res.Attempts)
	return nil
}

func shortErr(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}
