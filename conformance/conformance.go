// Package conformance checks an HTTP API against the Idempotency-Key
// contract from the outside, as any client could, and judges it by its
// effects: how many results each intent made, counted by the target's own
// command (Config.CountCmd) or, without one, by the resources its answers
// name. Where neither tells, a check says INCONCLUSIVE, never PASS.
//
// Each check is graded by a profile. Draft grades by the IETF draft this
// suite follows (Draft): a MUST broken is FAIL, a SHOULD is WARN, what the
// draft allows or leaves open is INFO. Strict grades by the contract of
// demo-api (byte-identical replay, 5xx not stored, 400 for a malformed
// key, 422 on a mismatch, keys per actor). Two results for one key, or one
// actor's answer replayed to another, FAIL under every profile.
package conformance

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Version is the suite's version, written in every JSON report.
const Version = "2.0.0"

// Draft is the version of the IETF draft the checks cite; §n are its
// sections.
const Draft = "draft-ietf-httpapi-idempotency-key-header-06"

// Profile is how checks are graded.
type Profile string

const (
	ProfileDraft  Profile = "draft"  // the draft's MUST → FAIL, SHOULD → WARN, MAY or silence → INFO
	ProfileStrict Profile = "strict" // the contract of demo-api
)

// Policy is what a target documents where servers legitimately differ.
// Under ProfileStrict it is fixed (StrictPolicy).
type Policy struct {
	KeyOptional    bool   // a request without a key runs, unprotected (Stripe's model)
	FailuresStored bool   // a 5xx is stored and replayed (§2.6 allows it)
	Replay         string // "bytes": a replay is the first answer byte for byte; "resource": it names the same result
}

// StrictPolicy is the policy ProfileStrict holds every target to.
var StrictPolicy = Policy{Replay: "bytes"}

// Request is one request of an operation's setup: method, path and body,
// where {name} is filled from an earlier setup answer's JSON field name
// and {{nonce}} by the intent's nonce.
type Request struct {
	Method, Path string
	Body         []byte
}

// Config is the target and what the checks may send it.
type Config struct {
	Base   string      // the API's base URL, e.g. http://localhost:8080
	Method string      // the operation's method, e.g. POST
	Path   string      // its path; {name} is filled from the setup's answers
	Body   []byte      // a request it accepts (2xx); {{nonce}} is a fresh value per intent
	Header http.Header // on every request, e.g. Authorization

	// OtherBody is another request it accepts, under a used key: the
	// mismatch check's. Empty: mismatch is SKIP.
	OtherBody []byte
	// Setup runs before each intent, in order: what the operation needs
	// (e.g. a create before a cancel). Each is sent with a fresh key.
	Setup []Request
	// CountCmd is a shell command that prints how many results an intent
	// made; {{nonce}} and {name} are filled as in Path. Empty: results are
	// the resources the answers name.
	CountCmd string
	// OtherActor holds the headers that make a request a second actor's
	// (they replace Header's of the same names). Empty: scope is SKIP.
	OtherActor http.Header
	// FailHeader makes the target answer 5xx after it took the key (a
	// fault knob of a test build). Empty: failure-not-stored is SKIP.
	FailHeader http.Header
	// RefusedBody is a request the operation refuses by a business rule
	// (a 4xx it stores). Empty: refusal-replayed refuses by repeating the
	// operation under a second key, where a setup gives it a resource.
	RefusedBody []byte

	Profile   Profile
	Policy    Policy
	KeyHeader string        // default Idempotency-Key
	TTL       time.Duration // the target's key lifetime; 0: expiry is SKIP
	Storm     int           // concurrent requests on one key per storm; default 20
	Repeat    int           // storms, and hang-up delays of the lost-response sweep; default 5
	Settle    time.Duration // how long a retrying client waits for a key in progress; default 40s
	Timeout   time.Duration // bounds each request; default 10s
	Only      []string      // run only these checks
	Skip      []string      // do not run these
}

// Verdict is the outcome of one check.
type Verdict string

const (
	Pass         Verdict = "PASS"
	Fail         Verdict = "FAIL"
	Warn         Verdict = "WARN"         // a SHOULD of the draft not kept (or, strict, a rule of the contract's that is advice)
	Info         Verdict = "INFO"         // what the draft allows or leaves open; the target's choice, said
	Inconclusive Verdict = "INCONCLUSIVE" // the effect could not be seen; never a pass
	Skip         Verdict = "SKIP"         // not run, and why
)

// Result is one check's verdict with its level (MUST, SHOULD, MAY,
// contract, or core: what the header is for), the section it cites, why in
// one line, and its evidence.
type Result struct {
	Check    string   `json:"check"`
	Verdict  Verdict  `json:"verdict"`
	Level    string   `json:"level"`
	Section  string   `json:"section"`
	Why      string   `json:"why"`
	Evidence Evidence `json:"evidence"`

	exchanges []string // what was sent and answered, for a transcript
}

// Evidence is what a check saw, in fields a program can read.
type Evidence struct {
	Keys         []string  `json:"keys,omitempty"`
	Statuses     []int     `json:"statuses,omitempty"`
	ResultIDs    []string  `json:"result_ids,omitempty"`
	Counts       []int     `json:"counts,omitempty"` // results per intent
	DelaysMS     []float64 `json:"delays_ms,omitempty"`
	StuckSeconds []float64 `json:"stuck_seconds,omitempty"`
	Storms       int       `json:"storms,omitempty"`
	Duplicated   int       `json:"duplicated,omitempty"` // intents with more than one result
	Rate         string    `json:"rate,omitempty"`
}

// Report is every check's result against one target.
type Report struct {
	Suite   string   `json:"suite"`
	Version string   `json:"version"`
	Draft   string   `json:"draft"`
	Profile Profile  `json:"profile"`
	Target  string   `json:"target"`
	Flags   []string `json:"flags,omitempty"`
	Results []Result `json:"checks"`
}

// Exit codes of the command.
const (
	ExitConforms = 0 // no FAIL (WARN, INFO, INCONCLUSIVE and SKIP allowed)
	ExitFailed   = 1 // a check failed
	ExitUsage    = 2 // the command was given wrong flags
	ExitUnusable = 3 // the target cannot be checked: unreachable, auth refused, no such route, not JSON, hangs
)

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool { return res.Verdict == Fail })
}

// UnusableError is a target that cannot be checked, found by the preflight:
// one line that says why.
type UnusableError struct{ Why string }

func (e *UnusableError) Error() string { return "the target is unusable: " + e.Why }

// UsageError is a Config the suite cannot run.
type UsageError struct{ Why string }

func (e *UsageError) Error() string { return e.Why }

// Run checks the target: a preflight exchange first (an *UnusableError if
// the target cannot be checked), then each check in order. Its other
// errors are a *UsageError, or the context's.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	r := newRunner(cfg)
	defer r.hc.CloseIdleConnections()
	rep := Report{Suite: "idemcheck", Version: Version, Draft: Draft, Profile: cfg.Profile, Target: cfg.Method + " " + r.base + cfg.Path}
	if err := r.preflight(ctx); err != nil {
		return rep, err
	}
	for _, c := range checks {
		if !cfg.runs(c.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		r.log = nil
		res := c.run(r, ctx)
		res.Check, res.Section = c.name, c.section
		if res.Level == "" {
			res.Level = c.level
		}
		res.exchanges = r.log
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// Names lists the checks in the order they run.
func Names() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

func (c Config) runs(name string) bool {
	return (len(c.Only) == 0 || slices.Contains(c.Only, name)) && !slices.Contains(c.Skip, name)
}

// withDefaults fills what is left zero and refuses what cannot run.
func (c Config) withDefaults() (Config, error) {
	base, err := url.Parse(c.Base)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return c, &UsageError{fmt.Sprintf("--base %q: want an http or https URL", c.Base)}
	}
	if c.Method == "" || !strings.HasPrefix(c.Path, "/") {
		return c, &UsageError{fmt.Sprintf("--route %q %q: want a method and a path, e.g. 'POST /v1/orders'", c.Method, c.Path)}
	}
	for _, s := range c.Setup {
		if s.Method == "" || !strings.HasPrefix(s.Path, "/") {
			return c, &UsageError{fmt.Sprintf("--setup %q %q: want 'METHOD /path [body]'", s.Method, s.Path)}
		}
	}
	for _, name := range append(slices.Clone(c.Only), c.Skip...) {
		if !slices.Contains(Names(), name) {
			return c, &UsageError{fmt.Sprintf("no check %q; the checks: %s", name, strings.Join(Names(), ", "))}
		}
	}
	switch c.Profile {
	case "":
		c.Profile = ProfileDraft
	case ProfileDraft, ProfileStrict:
	default:
		return c, &UsageError{fmt.Sprintf("--profile %q: want draft or strict", c.Profile)}
	}
	if c.Policy.Replay == "" {
		c.Policy.Replay = "resource"
		if c.Profile == ProfileStrict {
			c.Policy.Replay = "bytes"
		}
	}
	if c.Policy.Replay != "bytes" && c.Policy.Replay != "resource" {
		return c, &UsageError{fmt.Sprintf("--replay %q: want bytes or resource", c.Policy.Replay)}
	}
	if c.Profile == ProfileStrict && c.Policy != StrictPolicy {
		return c, &UsageError{"--profile strict is demo-api's contract: a key required, failures not stored, replay by bytes; drop --key-optional, --failures-stored and --replay"}
	}
	if c.CountCmd != "" && !strings.Contains(c.CountCmd, "{") {
		return c, &UsageError{"--count-cmd needs {{nonce}} (or a {name} of the setup) to tell one intent's results from another's"}
	}
	if c.CountCmd != "" && !strings.Contains(string(c.Body), nonceMark) && len(c.Setup) == 0 {
		return c, &UsageError{"--count-cmd needs {{nonce}} in --body (or a --setup whose {name} is in the route), so that each intent is told apart"}
	}
	if c.KeyHeader == "" {
		c.KeyHeader = "Idempotency-Key"
	}
	c.KeyHeader = http.CanonicalHeaderKey(c.KeyHeader)
	if c.Header == nil {
		c.Header = http.Header{}
	}
	c.Storm = orDefault(c.Storm, 20)
	c.Repeat = orDefault(c.Repeat, 5)
	if c.Storm < 2 || c.Repeat < 1 || c.TTL < 0 || c.Settle < 0 || c.Timeout < 0 {
		return c, &UsageError{"a storm is at least 2 requests, --repeat at least 1, and durations not negative"}
	}
	if c.Settle == 0 {
		c.Settle = 40 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	return c, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
