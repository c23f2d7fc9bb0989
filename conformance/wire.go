package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// nonceMark is replaced by a fresh value per intent.
const nonceMark = "{{nonce}}"

// runner sends the checks' requests and keeps what the preflight and one
// check leave for the others.
type runner struct {
	cfg  Config
	base string
	hc   *http.Client

	current check    // the check that runs
	first   *intent  // the preflight's intent, which replay and mismatch reuse
	replays []answer // its two retries, sent by the preflight
	// latencies are the preflight's first answers, each a fresh key: the
	// lost-response sweep spans past them.
	latencies []time.Duration
	// replayMark is the header that marks a replay (e.g. Idempotent-Replayed),
	// if the preflight's retries carried one.
	replayMark string

	mu       sync.Mutex
	log      []string  // the current check's exchanges and counts, for a transcript
	logStart time.Time // when the current check began
	down     error     // the last request that got no answer at all
	dead     error     // down, and a probe got no answer either: the run stops
}

func newRunner(cfg Config) *runner {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Storm // a storm's connections are kept for the next
	return &runner{cfg: cfg, base: strings.TrimSuffix(cfg.Base, "/"), hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}}
}

// intent is one thing a client means to do once: a nonce, what its setup
// answered, the operation's path and bodies filled from them, and its key.
type intent struct {
	key    string
	header http.Header
	vars   map[string]string // the setup answers' fields, and nonce
	path   string
	body   []byte
	other  []byte
	answer answer // its first answer, once sent
}

// answer is what one request got: a status, headers and body, or no
// answer at all (err), and how long it took.
type answer struct {
	status  int
	header  http.Header
	body    []byte
	err     error
	sent    time.Time
	elapsed time.Duration
}

func (a answer) String() string {
	if a.err != nil {
		return "no answer (" + a.err.Error() + ")"
	}
	return strconv.Itoa(a.status)
}

func (a answer) ok() bool { return a.err == nil && a.status/100 == 2 }

// newIntent runs the setup as the actor of header, with nonce (empty: a
// fresh one), and fills the operation's path and bodies. Its error says
// which setup request failed.
func (r *runner) newIntent(ctx context.Context, header http.Header, nonce string) (*intent, error) {
	if nonce == "" {
		nonce = rand.Text()[:16]
	}
	in := &intent{key: newKey(), header: header, vars: map[string]string{"nonce": nonce}}
	for _, s := range r.cfg.Setup {
		path, body := in.fill(s.Path, true), []byte(in.fill(string(s.Body), false))
		a := r.exchange(ctx, s.Method, path, header, body, quote(newKey()))
		if !a.ok() {
			return nil, fmt.Errorf("setup %s %s got %s%s", s.Method, path, a, withBody(a.body))
		}
		var fields map[string]any
		if json.Unmarshal(a.body, &fields) != nil {
			return nil, fmt.Errorf("setup %s %s answered no JSON object%s", s.Method, path, withBody(a.body))
		}
		for name, v := range fields {
			switch v := v.(type) {
			case string:
				in.vars[name] = v
			case float64:
				in.vars[name] = strconv.FormatFloat(v, 'f', -1, 64)
			}
		}
	}
	in.path = in.fill(r.cfg.Path, true)
	if strings.Contains(in.path, "{") {
		return nil, fmt.Errorf("the route %s has a {name} no setup answer filled", in.path)
	}
	in.body = []byte(in.fill(string(r.cfg.Body), false))
	in.other = []byte(in.fill(string(r.cfg.OtherBody), false))
	return in, nil
}

// fill replaces {{nonce}} and each {name} of the setup's answers in s,
// escaped for a path if inPath.
func (in *intent) fill(s string, inPath bool) string {
	var pairs []string
	for name, v := range in.vars {
		if inPath {
			v = url.PathEscape(v)
		}
		pairs = append(pairs, "{"+name+"}", v)
	}
	s = strings.ReplaceAll(s, nonceMark, in.vars["nonce"])
	return strings.NewReplacer(pairs...).Replace(s)
}

// resultIDs are the results an answer names: the top-level JSON fields
// named id or ending in Id, ID or _id (all of them, so that an actor's id
// shared by every result cannot hide two resources), else its Location.
// A value the setup gave (the resource a state change acts on) names no
// result of the intent's own.
func (in *intent) resultIDs(a answer) []string {
	if !a.ok() {
		return nil
	}
	given := map[string]bool{}
	for name, v := range in.vars {
		if name != "nonce" {
			given[v] = true
		}
	}
	var ids []string
	var fields map[string]json.RawMessage
	if json.Unmarshal(a.body, &fields) == nil {
		for name, raw := range fields {
			if name != "id" && !strings.HasSuffix(name, "Id") && !strings.HasSuffix(name, "ID") && !strings.HasSuffix(name, "_id") {
				continue
			}
			var v any
			if json.Unmarshal(raw, &v) != nil {
				continue
			}
			switch v := v.(type) {
			case string:
				if v != "" && !given[v] {
					ids = append(ids, name+"="+v)
				}
			case float64:
				if s := strconv.FormatFloat(v, 'f', -1, 64); !given[s] {
					ids = append(ids, name+"="+s)
				}
			}
		}
	}
	if loc := a.header.Get("Location"); len(ids) == 0 && loc != "" && !slices.ContainsFunc(keys(given), func(v string) bool { return strings.Contains(loc, v) }) {
		ids = append(ids, "Location="+loc)
	}
	slices.Sort(ids)
	return ids
}

// result is the one identity of the results an answer names; empty when
// it names none.
func (in *intent) result(a answer) string { return strings.Join(in.resultIDs(a), " ") }

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// newKey is a fresh key: random base32 behind a prefix that says where it
// came from.
func newKey() string { return "idemcheck-" + rand.Text() }

// quote writes a key as the draft's sf-string (§2.1).
func quote(key string) string { return `"` + key + `"` }

// headerWith is h with the headers of over replacing those of the same name.
func headerWith(h, over http.Header) http.Header {
	out := h.Clone()
	for name, values := range over {
		out[name] = slices.Clone(values)
	}
	return out
}

// send sends the intent's operation with body and the key header's values
// (none: no key header at all).
func (r *runner) send(ctx context.Context, in *intent, body []byte, keys ...string) answer {
	return r.exchange(ctx, r.cfg.Method, in.path, in.header, body, keys...)
}

// exchange sends one request and reads its answer. A 429 is no answer
// about a key (a rate limit stores nothing): exchange waits its
// Retry-After and sends again, within cfg.Settle.
func (r *runner) exchange(ctx context.Context, method, path string, header http.Header, body []byte, keys ...string) answer {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		a := r.exchangeOnce(ctx, method, path, header, body, keys...)
		if a.status != http.StatusTooManyRequests || !sleep(ctx, retryAfter(a), deadline) {
			return a
		}
	}
}

func (r *runner) request(ctx context.Context, method, path string, header http.Header, body []byte, keys ...string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	if req.Header.Get("Content-Type") == "" && len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Del(r.cfg.KeyHeader)
	for _, k := range keys {
		req.Header.Add(r.cfg.KeyHeader, k)
	}
	return req, nil
}

func (r *runner) exchangeOnce(ctx context.Context, method, path string, header http.Header, body []byte, keys ...string) answer {
	req, err := r.request(ctx, method, path, header, body, keys...)
	if err != nil {
		return answer{err: err}
	}
	return r.do(req, body)
}

// do sends req and reads its answer whole, and writes both to the log. A
// request that gets no answer at all is noted: the target may be down.
func (r *runner) do(req *http.Request, body []byte) answer {
	start := time.Now()
	a := func() answer {
		resp, err := r.hc.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return answer{err: fmt.Errorf("reading the body: %w", err)}
		}
		return answer{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	a.sent, a.elapsed = start, time.Since(start)
	if a.err != nil && req.Context().Err() == nil {
		r.mu.Lock()
		r.down = a.err
		r.mu.Unlock()
	}
	r.record(req, body, a)
	return a
}

// stopped reports whether the target stopped answering: a request got no
// answer since the last call, and a probe (the operation once more, on a
// fresh intent) gets none either. Then r.dead says why, and the run ends.
func (r *runner) stopped(ctx context.Context) bool {
	r.mu.Lock()
	down := r.down
	r.down = nil
	r.mu.Unlock()
	if r.dead != nil || down == nil {
		return r.dead != nil
	}
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err == nil {
		if a := r.send(ctx, in, in.body, quote(in.key)); a.err != nil {
			err = a.err
		}
	}
	if err != nil && ctx.Err() == nil {
		r.dead = fmt.Errorf("%v; a probe then: %v", down, err)
	}
	r.mu.Lock()
	r.down = nil
	r.mu.Unlock()
	return r.dead != nil
}

// settled is where a retrying client ends: its last answer, how long the
// key answered 409 (in progress) before it, and whether it gave up at
// cfg.Settle or was asked to wait past it.
type settled struct {
	answer
	inProgress time.Duration
	gaveUp     bool // still 409 at cfg.Settle
	askedPast  time.Duration
}

// settle sends the intent's key with body until the answer is not 409,
// waiting each Retry-After (1 s without one), for at most cfg.Settle.
func (r *runner) settle(ctx context.Context, in *intent, body []byte) settled {
	start := time.Now()
	deadline := start.Add(r.cfg.Settle)
	for {
		a := r.send(ctx, in, body, quote(in.key))
		if a.status != http.StatusConflict {
			return settled{answer: a, inProgress: time.Since(start)}
		}
		d := retryAfter(a)
		if time.Now().Add(d).After(deadline) {
			s := settled{answer: a, inProgress: time.Since(start)}
			if time.Now().Add(time.Second).After(deadline) {
				s.gaveUp = true
			} else {
				s.askedPast = d
			}
			return s
		}
		if !sleep(ctx, d, deadline) {
			return settled{answer: a, inProgress: time.Since(start), gaveUp: true}
		}
	}
}

// retryAfter is a's Retry-After, at least 100 ms; 1 s when it has none.
func retryAfter(a answer) time.Duration {
	v := strings.TrimSpace(a.header.Get("Retry-After"))
	if s, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(s)*time.Second, 100*time.Millisecond)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 100*time.Millisecond)
	}
	return time.Second
}

// sleep waits d, unless that passes deadline or ctx ends first; it reports
// whether it waited.
func sleep(ctx context.Context, d time.Duration, deadline time.Time) bool {
	if time.Now().Add(d).After(deadline) {
		return false
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// together sends n copies of the intent's request at once: each from its
// own goroutine, all released by one signal.
func (r *runner) together(ctx context.Context, in *intent, n int) []answer {
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		req, err := r.request(ctx, r.cfg.Method, in.path, in.header, in.body, quote(in.key))
		if err != nil {
			answers[i] = answer{err: err}
			continue
		}
		wg.Go(func() {
			<-start
			answers[i] = r.do(req, in.body)
		})
	}
	close(start)
	wg.Wait()
	return answers
}

// hangUp sends the intent's request on a connection of its own, waits
// delay, and closes the connection without reading a byte: the client of a
// lost response. The request is written whole first.
func (r *runner) hangUp(ctx context.Context, in *intent, delay time.Duration) error {
	req, err := r.request(ctx, r.cfg.Method, in.path, in.header, in.body, quote(in.key))
	if err != nil {
		return err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), map[string]string{"http": "80", "https": "443"}[req.URL.Scheme])
	}
	d := &net.Dialer{Timeout: r.cfg.Timeout}
	var conn net.Conn
	if req.URL.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: d, Config: &tls.Config{ServerName: req.URL.Hostname()}}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(r.cfg.Timeout))
	sent := time.Now()
	if err := req.Write(conn); err != nil {
		return err
	}
	r.record(req, in.body, answer{sent: sent, err: fmt.Errorf("(idemcheck hangs up %s after sending, reading nothing)", delay)})
	select {
	case <-time.After(delay):
	case <-ctx.Done():
	}
	return nil
}

// safeValue is what a setup answer may put into --count-cmd, which a
// shell runs.
var safeValue = regexp.MustCompile(`^[A-Za-z0-9._:@-]+$`)

// count runs cfg.CountCmd for the intent and returns the number it
// printed; -1 without a CountCmd.
func (r *runner) count(ctx context.Context, in *intent) (int, error) {
	if r.cfg.CountCmd == "" {
		return -1, nil
	}
	for name, v := range in.vars {
		if strings.Contains(r.cfg.CountCmd, "{"+name+"}") && !safeValue.MatchString(v) {
			return 0, fmt.Errorf("--count-cmd: the setup's %s %q is not safe to hand a shell", name, v)
		}
	}
	cmdline := in.fill(r.cfg.CountCmd, false)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
	if runtime.GOOS == "windows" {
		cmd = exec.CommandContext(ctx, "cmd", "/C", cmdline)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	n, nerr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err == nil && nerr != nil {
		err = fmt.Errorf("printed %q, want a number", snippet(out))
	}
	line := fmt.Sprintf("$ --count-cmd for %s (%s) → %q", in.key, in.varsText(), snippet(out))
	if err != nil {
		line += ", " + err.Error()
	}
	r.logLine(start, line+withBody(stderr.Bytes()))
	if err != nil {
		return 0, &CountError{Err: err, Stderr: snippet(stderr.Bytes())}
	}
	return n, nil
}

// varsText is the intent's nonce and setup fields, for a line.
func (in *intent) varsText() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(in.vars)) {
		parts = append(parts, name+"="+in.vars[name])
	}
	return strings.Join(parts, " ")
}

// record writes one exchange to the current check's log, when it was
// sent, with the values of the headers the suite was given (tokens) left
// out and named by the flag that gave them, so that two actors are told
// apart.
func (r *runner) record(req *http.Request, body []byte, a answer) {
	var b strings.Builder
	fmt.Fprintf(&b, "> %s %s\n", req.Method, req.URL)
	for _, name := range slices.Sorted(maps.Keys(req.Header)) {
		for _, v := range req.Header[name] {
			fmt.Fprintf(&b, "> %s: %s\n", name, r.redact(name, v))
		}
	}
	fmt.Fprintf(&b, ">\n> %s\n", snippet(body))
	if a.err != nil {
		fmt.Fprintf(&b, "< %v\n", a.err)
	} else {
		fmt.Fprintf(&b, "< %d (%s)\n", a.status, a.elapsed.Round(time.Millisecond))
		for _, name := range slices.Sorted(maps.Keys(a.header)) {
			for _, v := range a.header[name] {
				fmt.Fprintf(&b, "< %s: %s\n", name, v)
			}
		}
		fmt.Fprintf(&b, "<\n< %s\n", snippet(a.body))
	}
	r.logLine(a.sent, b.String())
}

// redact is a header's value as a transcript shows it: the value of a
// header given by a flag is replaced by the flag's name.
func (r *runner) redact(name, v string) string {
	if name == "Content-Type" || name == r.cfg.KeyHeader {
		return v
	}
	for _, given := range []struct {
		flag string
		h    http.Header
	}{{"--other-actor-header", r.cfg.OtherActor}, {"--fail-header", r.cfg.FailHeader}, {"--header", r.cfg.Header}} {
		if slices.Contains(given.h[name], v) {
			return "(" + given.flag + ")"
		}
	}
	if _, secret := r.cfg.Header[name]; secret {
		return "(given)"
	}
	return v
}

// startLog begins the log of a check.
func (r *runner) startLog() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log, r.logStart = nil, time.Now()
}

// takeLog ends the log of a check and returns it.
func (r *runner) takeLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	log := r.log
	r.log = nil
	return log
}

// logLine adds text to the log, stamped with the clock at at and the time
// since the check began.
func (r *runner) logLine(at time.Time, text string) {
	if at.IsZero() {
		at = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.log) < 1000 {
		r.log = append(r.log, fmt.Sprintf("[%s +%s]\n%s", at.UTC().Format("15:04:05.000"), at.Sub(r.logStart).Round(100*time.Microsecond), text))
	}
}

// snippet is up to 200 bytes of b, for a line.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// withBody is ": " and a snippet of b, or nothing when b is empty.
func withBody(b []byte) string {
	if s := snippet(b); s != "" {
		return ": " + s
	}
	return ""
}
