// Package conformance checks an HTTP API against the Idempotency-Key
// contract from the outside, as any client could: it sends requests to one
// create route and judges the answers. It imports nothing of this service,
// so it judges any API given a route, two bodies and the headers a request
// needs.
//
// Each check ends PASS, FAIL, WARN (allowed, but not what the contract
// asks) or SKIP (not checked here, and why), and names what it checks: a
// section of the IETF draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header, sections as in its -06), or
// the contract of this project where the draft says nothing.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Config is the target and what the checks may send it.
type Config struct {
	Base      string      // the API's base URL, e.g. http://localhost:8080
	Method    string      // the create route's method, e.g. POST
	Path      string      // the create route's path, e.g. /v1/demo-requests
	Body      []byte      // a request the API accepts (2xx)
	OtherBody []byte      // another request it accepts: the mismatch check's
	Header    http.Header // sent with every request, e.g. Authorization

	// OtherActor holds the headers that make a request a second actor's
	// (they replace Header's of the same names). Empty: scope is SKIP.
	OtherActor http.Header
	// FailHeader holds headers that make the target answer 5xx after it
	// took the key, e.g. a fault knob of a test build. Empty: the failure
	// check is SKIP, since nothing from outside can make any API fail.
	FailHeader http.Header

	KeyHeader string        // the key's header; default Idempotency-Key
	TTL       time.Duration // how long the target keeps a completed key; 0: expiry is SKIP
	Storm     int           // concurrent requests on one key per storm; default 20
	Repeat    int           // storms, and lost responses, tried; default 5
	// Settle is how long a key may answer 409 (in progress) before a
	// check that waits for its result gives up; default 30s.
	Settle time.Duration
	// Timeout bounds one request; default 30s.
	Timeout time.Duration
}

// Verdict is the outcome of one check.
type Verdict string

const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	Warn Verdict = "WARN" // allowed, but not what the contract asks
	Skip Verdict = "SKIP" // not checked; Why says why
)

// Result is one check's verdict, why in one line, and what it checks.
type Result struct {
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	Why     string  `json:"why"`
	Ref     string  `json:"ref"`
}

// Report is every check's result against one target.
type Report struct {
	Target  string   `json:"target"`
	Results []Result `json:"results"`
}

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	for _, res := range r.Results {
		if res.Verdict == Fail {
			return true
		}
	}
	return false
}

// check is one branch of the contract: a name, the reference it checks,
// and how.
type check struct {
	name, ref string
	run       func(*runner, context.Context) (Verdict, string)
}

// checks run in this order: replay and mismatch reuse the key of
// first-request; every other check takes fresh keys of its own.
var checks = []check{
	{"key-missing", "draft §2.7: 400", (*runner).keyMissing},
	{"key-malformed", "draft §2.1 (an sf-string), §5 (validate the key); contract: 400", (*runner).keyMalformed},
	{"key-twice", "draft §2.1 (one Item field); contract: 400", (*runner).keyTwice},
	{"first-request", "draft §2.6: first time request", (*runner).firstRequest},
	{"replay", "draft §2.6: retry gets the previous result; contract: byte for byte", (*runner).replay},
	{"mismatch", "draft §2.2, §2.7: 422", (*runner).mismatch},
	{"storm", "draft §2.6, §2.7: concurrent request 409; contract: one result per key", (*runner).storm},
	{"lost-response", "draft §1: a client that timed out retries; contract: lost response", (*runner).lostResponse},
	{"scope", "draft §5: a composite key of key and client; contract: a key per actor", (*runner).scope},
	{"expiry", "draft §2.3; contract: an expired key is a new intent", (*runner).expiry},
	{"failure-not-stored", "contract: a transient failure is not stored (draft §2.6 replays completed operations only)", (*runner).failureNotStored},
}

// Names lists the checks in the order they run.
func Names() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

// Run runs every check against the target, in order, and returns their
// results. Its error is a Config it cannot use; a target that answers
// wrongly is a FAIL in the report, not an error.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, target, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	r := newRunner(cfg, target)
	defer r.hc.CloseIdleConnections()
	rep := Report{Target: cfg.Method + " " + target}
	for _, c := range checks {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		v, why := c.run(r, ctx)
		rep.Results = append(rep.Results, Result{Check: c.name, Verdict: v, Why: why, Ref: c.ref})
	}
	return rep, nil
}

// withDefaults fills what is left zero and returns the route's URL.
func (c Config) withDefaults() (Config, string, error) {
	base, err := url.Parse(c.Base)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return c, "", fmt.Errorf("base %q: want an http or https URL", c.Base)
	}
	if c.Method == "" || c.Path == "" || c.Path[0] != '/' {
		return c, "", fmt.Errorf("route %q %q: want a method and a path, e.g. POST /v1/demo-requests", c.Method, c.Path)
	}
	if len(c.Body) == 0 || len(c.OtherBody) == 0 {
		return c, "", errors.New("give a body and another body: two requests the API accepts")
	}
	if c.KeyHeader == "" {
		c.KeyHeader = "Idempotency-Key"
	}
	c.KeyHeader = http.CanonicalHeaderKey(c.KeyHeader)
	if c.Header == nil {
		c.Header = http.Header{}
	}
	if c.Storm == 0 {
		c.Storm = 20
	}
	if c.Repeat == 0 {
		c.Repeat = 5
	}
	if c.Storm < 2 || c.Repeat < 1 || c.TTL < 0 {
		return c, "", errors.New("a storm is at least 2 requests, repeat at least 1, and a TTL not negative")
	}
	if c.Settle == 0 {
		c.Settle = 30 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	return c, base.JoinPath(c.Path).String(), nil
}
