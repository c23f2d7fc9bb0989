package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/demo-api/demo-api/internal/conformance"
)

const conformanceUsage = `usage: demo-api conformance [flags]

Checks an Idempotency-Key API from the outside, as any client could: the key
missing, malformed or sent twice; a first request and its byte-equal replay;
another body under a used key; storms of concurrent requests on one key; a
response lost on the way; the key under a second actor; expiry; a failure
that must not be stored. A line per check (PASS, FAIL, WARN, SKIP, with why
and the draft's section or the contract's rule), then a summary; exit 1 on
any FAIL. The target needs no knobs; without --other-actor-header, --ttl or
--fail-header those checks are SKIP, and the report says so.

Against this service (make run), as alice:
  demo-api conformance --header 'Authorization: Bearer dev-alice' \
    --other-actor-header 'Authorization: Bearer dev-bob' \
    --fail-header 'Workshop-Fail: after-claim'
`

// exitCheckFailed is demo-api conformance's exit status when a check failed.
const exitCheckFailed = 1

// conformanceCmd is demo-api conformance.
func conformanceCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo-api conformance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg conformance.Config
	fs.StringVar(&cfg.Base, "base", "http://localhost:8080", "the API's base URL")
	route := fs.String("route", "POST /v1/demo-requests", "the create route: method and path")
	body := fs.String("body", `{"topic":"conformance","note":"first"}`, "a request body the route accepts")
	other := fs.String("other-body", `{"topic":"conformance","note":"other"}`, "another body it accepts: the mismatch check's")
	header, otherActor, fail := headerFlags{}, headerFlags{}, headerFlags{}
	fs.Var(header, "header", "a header 'Name: value' on every request, e.g. the bearer token (repeatable; Content-Type defaults to application/json)")
	fs.Var(otherActor, "other-actor-header", "a header that makes a request a second actor's, replacing --header's of that name (repeatable; none: scope is SKIP)")
	fs.Var(fail, "fail-header", "a header that makes the target answer 5xx after it took the key (repeatable; none: failure-not-stored is SKIP)")
	fs.StringVar(&cfg.KeyHeader, "key-header", "Idempotency-Key", "the key's header")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "how long the target keeps a completed key; the expiry check waits that long (0: SKIP)")
	fs.IntVar(&cfg.Storm, "storm", 20, "concurrent requests on one key per storm")
	fs.IntVar(&cfg.Repeat, "repeat", 5, "storms, and lost responses, tried: races show only sometimes")
	asJSON := fs.Bool("json", false, "write the report as JSON")
	if err := ParseFlags(fs, args, conformanceUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &ExitError{ExitRefused, fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	method, path, ok := strings.Cut(strings.TrimSpace(*route), " ")
	if !ok {
		return &ExitError{ExitRefused, fmt.Errorf("--route %q: want 'METHOD /path'", *route)}
	}
	cfg.Method, cfg.Path = strings.ToUpper(method), strings.TrimSpace(path)
	cfg.Body, cfg.OtherBody = []byte(*body), []byte(*other)
	cfg.Header, cfg.OtherActor, cfg.FailHeader = http.Header(header), http.Header(otherActor), http.Header(fail)
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		return &ExitError{ExitRefused, err}
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		return &ExitError{exitCheckFailed, errors.New("a check failed")}
	}
	return nil
}
