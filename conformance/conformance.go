// Package conformance checks an HTTP API against the Idempotency-Key
// contract from the outside, as any client could, and judges it by its
// effects: how many results each intent made, counted by the target's own
// command (Config.CountCmd) or, without one, by the resources its answers
// name. Where neither tells, a check says INCONCLUSIVE, never PASS.
//
// Each check is graded by a profile. Draft grades by the IETF draft this
// suite follows (Draft): a MUST broken is FAIL, a SHOULD is WARN, a MAY or
// what the draft leaves open is INFO, each finding citing its section. Strict grades by the contract of
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

// Version is the suite's version, written in every JSON report. Its major
// is 1 (or 0): the module path has no /vN suffix, so a tag
// conformance/vX.Y.Z with X ≥ 2 would be refused by the go command.
const Version = "1.0.0"

// Draft is the version of the IETF draft the checks cite; §n are its
// sections.
const Draft = "draft-ietf-httpapi-idempotency-key-header-07"

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
	Storms    int           // storms of the storm check; default 24
	HangUps   int           // hang-ups of the lost-response sweep; default 20
	Settle    time.Duration // how long a retrying client waits for a key in progress; default 40s
	Timeout   time.Duration // bounds each request; default 10s
	Only      []string      // run only these checks
	Skip      []string      // do not run these

	// AllowInconclusive lets a run whose core check (storm,
	// lost-response) saw nothing end with exit 0; the report says so.
	AllowInconclusive bool
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

// Result is one check's verdict with the level of its worst finding
// (MUST, SHOULD, MAY, contract, or core: what the header is for), the
// section that finding cites, why in one line, and its evidence.
type Result struct {
	Check    string   `json:"check"`
	Verdict  Verdict  `json:"verdict"`
	Level    string   `json:"level"`
	Section  string   `json:"section"`
	Why      string   `json:"why"`
	Core     bool     `json:"core,omitempty"` // storm or lost-response: what the header is for
	Evidence Evidence `json:"evidence"`

	transcript []string // what was sent, answered and counted, for a transcript
}

// Evidence is what a check saw, in fields a program can read: each intent
// it made, and for the storm and lost-response sweeps, their size.
type Evidence struct {
	Intents    []IntentRecord `json:"intents,omitempty"`
	Storms     int            `json:"storms,omitempty"`
	Duplicated int            `json:"duplicated,omitempty"` // storms with more than one result
	HangUps    int            `json:"hang_ups,omitempty"`
	// CouldMiss is the size of fault this run could have missed: a
	// duplicate rarer than a rate of storms, a hang-up window narrower
	// than the sweep's step.
	CouldMiss string `json:"could_miss,omitempty"`
}

// IntentRecord is one intent as a check saw it: its key and nonce, each
// answer's status in order (0: none), the results they named, what
// --count-cmd counted, and for a hang-up its delay and how long the key
// answered 409 afterwards.
type IntentRecord struct {
	Key         string   `json:"key"`
	Nonce       string   `json:"nonce"`
	Statuses    []int    `json:"statuses,omitempty"`
	ResultIDs   []string `json:"result_ids,omitempty"`
	Count       *int     `json:"count,omitempty"`
	DelayMS     *float64 `json:"delay_ms,omitempty"`
	InProgressS *float64 `json:"in_progress_s,omitempty"`
}

// Report is every check's result against one target.
type Report struct {
	Suite   string   `json:"suite"`
	Version string   `json:"version"`
	Draft   string   `json:"draft"`
	Profile Profile  `json:"profile"`
	Target  string   `json:"target"`
	Flags   []string `json:"flags,omitempty"`
	// InconclusiveAllowed: --allow-inconclusive was given, so a core check
	// that saw nothing does not change the exit code.
	InconclusiveAllowed bool     `json:"inconclusive_allowed,omitempty"`
	Results             []Result `json:"checks"`
}

// Exit codes of the command.
const (
	ExitConforms     = 0 // no FAIL, and every core check saw its effect (WARN, INFO and SKIP allowed)
	ExitFailed       = 1 // a check failed
	ExitUsage        = 2 // wrong flags, or a --count-cmd that does not run
	ExitUnusable     = 3 // the target cannot be checked: unreachable, auth refused, no such route, a page, hangs, or stopped answering
	ExitInconclusive = 4 // no FAIL, but a core check (storm, lost-response) is INCONCLUSIVE: nothing says it conforms
)

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool { return res.Verdict == Fail })
}

// Unseen reports whether a core check ended INCONCLUSIVE.
func (r Report) Unseen() bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool { return res.Core && res.Verdict == Inconclusive })
}

// UnusableError is a target that cannot be checked, found by the preflight
// or when it stops answering mid-run: one line that says why.
type UnusableError struct{ Why string }

func (e *UnusableError) Error() string { return "the target is unusable: " + e.Why }

// UsageError is a Config the suite cannot run.
type UsageError struct{ Why string }

func (e *UsageError) Error() string { return e.Why }

// CountError is a --count-cmd that did not print a count: its exit and
// what it wrote to stderr.
type CountError struct {
	Err    error
	Stderr string
}

func (e *CountError) Error() string {
	s := "--count-cmd failed: " + e.Err.Error()
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

// Run checks the target: a preflight first (an *UnusableError if the
// target cannot be checked, a *CountError if --count-cmd does not count),
// then each check in order. A target that stops answering mid-run is an
// *UnusableError with the results so far. Its other errors are a
// *UsageError, or the context's.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	r := newRunner(cfg)
	defer r.hc.CloseIdleConnections()
	rep := Report{Suite: "idemcheck", Version: Version, Draft: Draft, Profile: cfg.Profile,
		Target: cfg.Method + " " + r.base + cfg.Path, InconclusiveAllowed: cfg.AllowInconclusive}
	r.startLog()
	if err := r.preflight(ctx); err != nil {
		return rep, err
	}
	preflight := r.takeLog()
	for _, c := range checks {
		if !cfg.runs(c.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		r.startLog()
		r.current = c
		res := c.run(r, ctx)
		res.Check, res.Core = c.name, c.core
		res.transcript = r.takeLog()
		if c.name == "first-request" || c.name == "replay" || c.name == "mismatch" {
			res.transcript = append(slices.Clip(preflight), res.transcript...) // they judge the preflight's intent
		}
		rep.Results = append(rep.Results, res)
		if r.stopped(ctx) {
			return rep, &UnusableError{fmt.Sprintf("it stopped answering during %s: %v", c.name, r.dead)}
		}
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

// Describe is one line per check, in the order they run: its name, what it
// sends, and the draft's section.
func Describe() string {
	var b strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&b, "  %-19s %s [%s]\n", c.name, c.about, c.section)
	}
	return b.String()
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
	c.Storms = orDefault(c.Storms, 24)
	c.HangUps = orDefault(c.HangUps, 20)
	if c.Storm < 2 || c.Storms < 1 || c.HangUps < 1 || c.TTL < 0 || c.Settle < 0 || c.Timeout < 0 {
		return c, &UsageError{"a storm is at least 2 requests, --storms and --hangups at least 1, and durations not negative"}
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
