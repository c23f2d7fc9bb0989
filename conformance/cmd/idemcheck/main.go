// Command idemcheck checks an Idempotency-Key API from the outside, as any
// client could, and judges it by its effects. Install it from a clone with
// `cd conformance && go install ./cmd/idemcheck`.
//
// Exit 0: it conforms (WARN allowed); 1: a check failed; 2: a usage
// error, or a --count-cmd that does not run; 3: the target cannot be
// checked, or stopped answering; 4: a core check saw nothing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/demo-api/demo-api/conformance"
)

var usage = `usage: idemcheck --route 'METHOD /path' [flags]

Checks an Idempotency-Key API from the outside, as any client could, and
judges it by its effects: how many results each intent made, counted by
--count-cmd or, without it, by the resources the answers name (else the
check is INCONCLUSIVE, never PASS). A preflight first: a target that is
unreachable, hangs, refuses the auth, has no such route or answers with a
page ends the run with one line and exit 3.

Profiles: draft (the default) grades by ` + conformance.Draft + `:
a MUST broken is FAIL, a SHOULD is WARN, what it allows is INFO. strict
grades by the contract of demo-api. Two results for one key, or one
actor's answer given to another, FAIL under both.

Exit: 0 conforms (WARN and INFO allowed), 1 a FAIL, 2 a usage error or a
--count-cmd that does not run, 3 the target is unusable or stopped
answering, 4 a core check (storm, lost-response) is INCONCLUSIVE (unless
--allow-inconclusive, which the report then states).

A create:
  idemcheck --base http://localhost:8080 --route 'POST /v1/orders' \
    --body '{"sku":"a-1","ref":"{{nonce}}"}' --other-body '{"sku":"b-2","ref":"{{nonce}}"}' \
    --header 'Authorization: Bearer …' --other-actor-header 'Authorization: Bearer …' \
    --count-cmd 'psql "$DB" -tAc "SELECT count(*) FROM orders WHERE ref = '\''{{nonce}}'\''"'
A state change, after its setup (each {name} is a field of a setup answer):
  idemcheck --route 'POST /v1/tickets/{id}/reopen' \
    --setup 'POST /v1/tickets {"title":"{{nonce}}"}' --setup 'POST /v1/tickets/{id}/close' …

The checks, in the order they run (--only, --skip):
` + conformance.Describe() + `
flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, opts, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return conformance.ExitConforms
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemcheck: %v\nrun idemcheck -h for the flags\n", err)
		return conformance.ExitUsage
	}
	rep, err := conformance.Run(ctx, cfg)
	rep.Flags = opts.shown
	var unusable *conformance.UnusableError
	var misuse *conformance.UsageError
	var counting *conformance.CountError
	switch {
	case errors.As(err, &misuse):
		fmt.Fprintf(stderr, "idemcheck: %v\nrun idemcheck -h for the flags\n", err)
		return conformance.ExitUsage
	case errors.As(err, &counting):
		fmt.Fprintf(stderr, "idemcheck: %v\n", err)
		return conformance.ExitUsage
	case errors.As(err, &unusable):
		fmt.Fprintf(stderr, "idemcheck: %v\n", err)
		if opts.json {
			writeJSON(stdout, map[string]any{"suite": rep.Suite, "version": rep.Version, "target": rep.Target, "unusable": unusable.Why, "checks": rep.Results, "exit": conformance.ExitUnusable})
		}
		return conformance.ExitUnusable
	case err != nil:
		fmt.Fprintf(stderr, "idemcheck: %v\n", err)
		return conformance.ExitUnusable
	}
	if opts.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemcheck: %v\n", err)
	}
	if opts.transcript != "" {
		files, err := rep.WriteTranscripts(opts.transcript)
		if err != nil {
			fmt.Fprintf(stderr, "idemcheck: --transcript: %v\n", err)
		}
		for _, f := range files {
			fmt.Fprintf(stderr, "idemcheck: the transcript of a check that did not pass: %s\n", f)
		}
	}
	if opts.junit != "" {
		if err := writeFile(opts.junit, rep.WriteJUnit); err != nil {
			fmt.Fprintf(stderr, "idemcheck: --junit: %v\n", err)
		}
	}
	return rep.Exit()
}

// options are the flags that shape the output, not the checks.
type options struct {
	json       bool
	transcript string
	junit      string
	shown      []string // the flags given, with header values left out
}

func parse(args []string, stdout io.Writer) (conformance.Config, options, error) {
	var cfg conformance.Config
	var opts options
	fs := flag.NewFlagSet("idemcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Base, "base", "http://localhost:8080", "the API's base URL")
	route := fs.String("route", "", "the operation: 'METHOD /path'; a {name} in the path is a field of a --setup answer")
	body := fs.String("body", "", "a request body the operation accepts; {{nonce}} is a fresh value per intent")
	other := fs.String("other-body", "", "another body it accepts, for the mismatch check (none: SKIP)")
	refused := fs.String("refused-body", "", "a body it refuses by a business rule, a 4xx it stores, for refusal-replayed")
	header, otherActor, fail := headers{}, headers{}, headers{}
	fs.Var(header, "header", "'Name: value' on every request, e.g. the bearer token (repeatable; a later one of a name replaces an earlier)")
	fs.Var(otherActor, "other-actor-header", "a header that makes a request a second actor's, replacing --header's of that name (repeatable; none: scope is SKIP)")
	fs.Var(fail, "fail-header", "a header that makes the target answer 5xx after it took the key (repeatable; none: failure-not-stored is SKIP)")
	fs.Func("setup", "'METHOD /path [body]' sent before each intent, with a fresh key; its JSON answer's fields fill {name} (repeatable, in order)", func(v string) error {
		method, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		path, b, _ := strings.Cut(strings.TrimSpace(rest), " ")
		cfg.Setup = append(cfg.Setup, conformance.Request{Method: strings.ToUpper(method), Path: path, Body: []byte(strings.TrimSpace(b))})
		return nil
	})
	fs.StringVar(&cfg.CountCmd, "count-cmd", "", "a shell command printing how many results an intent made; {{nonce}} and {name} are filled")
	profile := fs.String("profile", "draft", "draft (the IETF draft's levels) or strict (demo-api's contract)")
	fs.BoolVar(&cfg.Policy.KeyOptional, "key-optional", false, "policy: the operation runs without a key (draft profile only)")
	fs.BoolVar(&cfg.Policy.FailuresStored, "failures-stored", false, "policy: a 5xx is stored and replayed (draft profile only)")
	fs.StringVar(&cfg.Policy.Replay, "replay", "", "policy: bytes (a replay is the first answer byte for byte) or resource (it names the same result; the draft default)")
	fs.StringVar(&cfg.KeyHeader, "key-header", "Idempotency-Key", "the key's header")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "the target's key lifetime; the expiry check waits that long (0: SKIP)")
	fs.IntVar(&cfg.Storm, "storm", 20, "concurrent requests on one key per storm")
	fs.IntVar(&cfg.Storms, "storms", 24, "storms of the storm check (24 find a duplicate made in 1 storm of 6 in 98.7% of runs)")
	fs.IntVar(&cfg.HangUps, "hangups", 20, "hang-ups of the lost-response sweep, from 0 to half again past the median first answer")
	fs.BoolVar(&cfg.AllowInconclusive, "allow-inconclusive", false, "exit 0 even when a core check (storm, lost-response) is INCONCLUSIVE; the report says so")
	fs.DurationVar(&cfg.Settle, "settle", 0, "how long a retrying client waits for a key in progress, honouring Retry-After (default 40s)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "bounds each request (default 10s)")
	only := fs.String("only", "", "run only these checks, comma-separated")
	skip := fs.String("skip", "", "do not run these checks, comma-separated")
	fs.BoolVar(&opts.json, "json", false, "write the report as JSON")
	fs.StringVar(&opts.transcript, "transcript", "", "write the transcript (exchanges and counts, stamped) of each check that did not pass to this folder")
	fs.StringVar(&opts.junit, "junit", "", "also write the report as JUnit XML to this file")
	version := fs.Bool("version", false, "print the version and the draft it follows")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return cfg, opts, err
	}
	if *version {
		fmt.Fprintf(stdout, "idemcheck %s (%s)\n", conformance.Version, conformance.Draft)
		return cfg, opts, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return cfg, opts, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	method, path, ok := strings.Cut(strings.TrimSpace(*route), " ")
	if !ok {
		return cfg, opts, fmt.Errorf("--route %q: want 'METHOD /path'", *route)
	}
	cfg.Method, cfg.Path = strings.ToUpper(method), strings.TrimSpace(path)
	cfg.Body, cfg.OtherBody, cfg.RefusedBody = []byte(*body), []byte(*other), []byte(*refused)
	cfg.Header, cfg.OtherActor, cfg.FailHeader = http.Header(header), http.Header(otherActor), http.Header(fail)
	cfg.Profile = conformance.Profile(*profile)
	cfg.Only, cfg.Skip = list(*only), list(*skip)
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		switch f.Name {
		case "header", "other-actor-header", "fail-header":
			v = "(names: " + v + ")"
		case "count-cmd":
			v = "(given)" // it may hold a password
		}
		opts.shown = append(opts.shown, "--"+f.Name+"="+v)
	})
	return cfg, opts, nil
}

func list(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// headers is a repeatable 'Name: value' flag. String shows the names only:
// values are often tokens.
type headers http.Header

func (h headers) String() string {
	var names []string
	for name := range h {
		names = append(names, name)
	}
	return strings.Join(names, ",")
}

func (h headers) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	http.Header(h).Set(strings.TrimSpace(name), strings.TrimSpace(value)) // a later one of a name replaces an earlier
	return nil
}

// writeFile writes name with write.
func writeFile(name string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	return os.WriteFile(name, b.Bytes(), 0o644)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
