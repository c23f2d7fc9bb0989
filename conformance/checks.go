package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// check is one branch of the contract: a name, the draft's level and
// section for what it judges, and how.
type check struct {
	name           string
	level, section string
	run            func(*runner, context.Context) Result
}

// checks run in this order; replay and mismatch reuse the preflight's key,
// every other check makes intents of its own.
var checks = []check{
	{"first-request", "SHOULD", "§2.6", (*runner).firstRequest},
	{"key-missing", "SHOULD", "§2.7", (*runner).keyMissing},
	{"key-malformed", "SHOULD", "§2.1, §5", (*runner).keyMalformed},
	{"key-twice", "SHOULD", "§2.1, §5", (*runner).keyTwice},
	{"replay", "SHOULD", "§2.6", (*runner).replay},
	{"mismatch", "SHOULD", "§2.4, §2.7", (*runner).mismatch},
	{"storm", "core", "§1, §2.6, §2.7", (*runner).storm},
	{"lost-response", "core", "§1, §2.6", (*runner).lostResponse},
	{"scope", "MAY", "§5", (*runner).scope},
	{"failure-not-stored", "MAY", "§2.6", (*runner).failureNotStored},
	{"refusal-replayed", "SHOULD", "§2.6", (*runner).refusalReplayed},
	{"expiry", "SHOULD", "§2.3", (*runner).expiry},
}

// judgement gathers a check's findings; its result is the worst of them.
type judgement struct {
	r        *runner
	findings []finding
	ev       Evidence
	core     bool // a FAIL of what the header is for: two results for one key, or a leak
}

type finding struct {
	v   Verdict
	why string
}

var rank = map[Verdict]int{Skip: 0, Pass: 1, Info: 2, Warn: 3, Inconclusive: 4, Fail: 5}

func (r *runner) judge() *judgement { return &judgement{r: r} }

// add records a finding.
func (j *judgement) add(v Verdict, format string, args ...any) {
	j.findings = append(j.findings, finding{v, fmt.Sprintf(format, args...)})
}

// broken records what FAILs under every profile: two results for one
// key, or one actor's answer given to another.
func (j *judgement) broken(format string, args ...any) {
	j.core = true
	j.add(Fail, format, args...)
}

// graded records a finding whose verdict depends on the profile.
func (j *judgement) graded(draft, strict Verdict, format string, args ...any) {
	v := draft
	if j.r.cfg.Profile == ProfileStrict {
		v = strict
	}
	j.add(v, format, args...)
}

// result is the worst finding first, the others after it, or PASS with
// pass when nothing was found. Run fills its level and section from the
// check, unless it is a FAIL of the core.
func (j *judgement) result(pass string) Result {
	res := Result{Verdict: Pass, Why: pass, Evidence: j.ev}
	if len(j.findings) == 0 {
		return res
	}
	fs := slices.Clone(j.findings)
	slices.SortStableFunc(fs, func(a, b finding) int { return rank[b.v] - rank[a.v] })
	res.Verdict, res.Why = fs[0].v, fs[0].why
	for _, f := range fs[1:] {
		if f.v != Pass {
			res.Why += "; also " + strings.ToLower(string(f.v)) + ": " + f.why
		}
	}
	if j.core {
		res.Level = "core"
	}
	return res
}

func (j *judgement) skip(why string) Result {
	j.findings = []finding{{Skip, why}}
	return j.result("")
}

// preflight sends the operation once, with a fresh key, and refuses a
// target that cannot be checked: unreachable, hanging, the auth refused,
// no such route, an answer that is not JSON, a body it refuses, or a
// --count-cmd that does not count it.
func (r *runner) preflight(ctx context.Context) error {
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return &UnusableError{err.Error()}
	}
	a := r.send(ctx, in, in.body, quote(in.key))
	route := r.cfg.Method + " " + r.base + in.path
	switch {
	case isTimeout(a.err):
		return &UnusableError{fmt.Sprintf("%s: no answer within --timeout %s", route, r.cfg.Timeout)}
	case a.err != nil:
		return &UnusableError{fmt.Sprintf("%s: no answer: %v", route, a.err)}
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return &UnusableError{fmt.Sprintf("%s: %d, the auth is refused (check --header)", route, a.status)}
	case a.status == http.StatusNotFound || a.status == http.StatusMethodNotAllowed:
		return &UnusableError{fmt.Sprintf("%s: %d, no such route", route, a.status)}
	case !isJSON(a):
		return &UnusableError{fmt.Sprintf("%s: %d %s, not JSON", route, a.status, a.header.Get("Content-Type"))}
	case !a.ok():
		return &UnusableError{fmt.Sprintf("%s: %d for --body, want 2xx: give a request the operation accepts%s", route, a.status, withBody(a.body))}
	}
	if n, err := r.count(ctx, in); err != nil {
		return &UnusableError{err.Error()}
	} else if n != -1 && n != 1 {
		return &UnusableError{fmt.Sprintf("--count-cmd printed %d after the first request, want 1", n)}
	}
	in.answer, r.first, r.latency = a, in, a.elapsed
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isJSON(a answer) bool {
	return strings.Contains(a.header.Get("Content-Type"), "json") || (len(a.body) > 0 && json.Valid(a.body))
}

func (r *runner) firstRequest(ctx context.Context) Result {
	j := r.judge()
	a := r.first.answer
	j.ev = Evidence{Keys: []string{r.first.key}, Statuses: []int{a.status}, ResultIDs: r.first.resultIDs(a)}
	named := r.first.result(a)
	if named == "" {
		named = "names no result (no id, no Location)"
	}
	return j.result(fmt.Sprintf("%d in %s, %s", a.status, a.elapsed.Round(time.Millisecond), named))
}

func (r *runner) keyMissing(ctx context.Context) Result {
	j := r.judge()
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	a := r.send(ctx, in, in.body)
	j.ev.Statuses = []int{a.status}
	switch {
	case a.status == http.StatusBadRequest:
		return j.result("400 without a key")
	case a.ok() && r.cfg.Policy.KeyOptional:
		return j.result(fmt.Sprintf("%d without a key: it ran unprotected, as --key-optional declares", a.status))
	case a.ok():
		j.graded(Warn, Fail, "%d without a key: it ran unprotected; §2.7 asks 400 where the operation requires the key (declare --key-optional if it does not)", a.status)
	default:
		j.graded(Warn, Fail, "%s without a key, want 400", a)
	}
	return j.result("")
}

func (r *runner) keyMalformed(ctx context.Context) Result {
	j := r.judge()
	for _, v := range []string{`"` + newKey(), quote(newKey() + "é")} {
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		a := r.send(ctx, in, in.body, v)
		j.ev.Keys, j.ev.Statuses = append(j.ev.Keys, v), append(j.ev.Statuses, a.status)
		switch {
		case a.status == http.StatusBadRequest:
		case a.ok():
			j.graded(Warn, Fail, "%d for the key %s, not an sf-string: the client MUST send one (§2.1), and the server should validate the key (§5); the contract says 400", a.status, v)
		default:
			j.graded(Warn, Fail, "%s for the key %s, want 400", a, v)
		}
	}
	return j.result("400 for an unclosed quote and for a key outside ASCII")
}

func (r *runner) keyTwice(ctx context.Context) Result {
	j := r.judge()
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	a := r.send(ctx, in, in.body, quote(newKey()), quote(newKey()))
	j.ev.Statuses = []int{a.status}
	switch {
	case a.status == http.StatusBadRequest:
		return j.result("400 for two key lines")
	case a.ok():
		j.graded(Warn, Fail, "%d for two key lines: it chose one; the field is one sf-string (§2.1), the contract says 400", a.status)
	default:
		j.graded(Warn, Fail, "%s for two key lines, want 400", a)
	}
	return j.result("")
}

func (r *runner) replay(ctx context.Context) Result {
	j := r.judge()
	in := r.first
	first := in.answer
	b := r.settle(ctx, in, in.body).answer
	n, err := r.count(ctx, in)
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{first.status, b.status}, ResultIDs: unique(in.result(first), in.result(b))}
	if n >= 0 {
		j.ev.Counts = []int{n}
	}
	mark := ", unmarked"
	if r.replayMark = replayMarkOf(first, b); r.replayMark != "" {
		mark = ", marked " + r.replayMark
	}
	sameBytes := bytes.Equal(b.body, first.body)
	switch {
	case err != nil:
		j.add(Inconclusive, "%v", err)
	case b.err != nil:
		j.add(Inconclusive, "the retry got %s", b)
	case n > 1:
		j.broken("the retry made a second result: %d results for one key", n)
	case in.result(first) != "" && in.result(b) != "" && in.result(first) != in.result(b):
		j.broken("the retry made a second result: %s, then %s", in.result(first), in.result(b))
	case b.status != first.status:
		j.graded(Warn, Fail, "the retry got %s, the first request %d: §2.6 asks the previous result", b, first.status)
	case !sameBytes && r.cfg.Policy.Replay == "bytes":
		j.graded(Warn, Fail, "the retry's body differs from the first answer's at %s: replay by bytes", firstDifference(first.body, b.body))
	case !sameBytes && in.result(b) == "" && n < 0:
		j.add(Inconclusive, "the retry's body differs, and it names no result: cannot tell a re-rendered replay from a second run (give --count-cmd)")
	case !sameBytes:
		j.add(Info, "the same result, re-rendered (replay by resource): %s", in.result(b)+countText(n))
	case n < 0 && in.result(b) == "":
		j.add(Inconclusive, "the same %d and bytes, but no id and no --count-cmd: a second run that answers the same cannot be told from a replay", b.status)
	}
	return j.result(fmt.Sprintf("the same %d and %d bytes%s, one result%s", b.status, len(b.body), mark, countText(n)))
}

func (r *runner) mismatch(ctx context.Context) Result {
	j := r.judge()
	if len(r.cfg.OtherBody) == 0 {
		return j.skip("no --other-body: give another request the operation accepts")
	}
	in := r.first
	b := r.send(ctx, in, in.other, quote(in.key))
	n, err := r.count(ctx, in)
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{b.status}, ResultIDs: unique(in.result(in.answer), in.result(b))}
	if n >= 0 {
		j.ev.Counts = []int{n}
	}
	// The first answer again: by its result, or by its bytes where a result
	// or a count says it ran once.
	sameResult := (in.result(b) != "" && in.result(b) == in.result(in.answer)) ||
		(bytes.Equal(b.body, in.answer.body) && (in.result(b) != "" || n == 1))
	switch {
	case err != nil:
		j.add(Inconclusive, "%v", err)
	case n > 1:
		j.broken("another body under a used key made a second result: %d results for one key", n)
	case b.ok() && in.result(b) != "" && !sameResult:
		j.broken("another body under a used key made a second result (%s)", in.result(b))
	case b.status == http.StatusUnprocessableEntity:
	case b.ok() && sameResult:
		j.graded(Info, Fail, "%d with the first answer for another body: no fingerprint (§2.4 makes it MAY; the contract says 422)", b.status)
	case b.ok():
		j.graded(Inconclusive, Fail, "%d for another body under a used key, naming no result: cannot tell whether it ran", b.status)
	default:
		j.graded(Warn, Fail, "%s for another body under a used key, want 422 (§2.7)", b)
	}
	return j.result("422 for another body under a used key")
}

func (r *runner) storm(ctx context.Context) Result {
	j := r.judge()
	statuses := map[int]int{}
	var dup, stuck, unknown, bare409, failed, mixed int
	for i := 0; i < r.cfg.Repeat; i++ {
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		answers := r.together(ctx, in, r.cfg.Storm)
		end := r.settle(ctx, in, in.body) // the answer a retrying client ends with
		answers = append(answers, end.answer)
		ids, nameless, refused := map[string]bool{}, false, false
		for _, a := range answers {
			statuses[a.status]++
			switch {
			case a.err != nil || a.status >= 500:
				failed++
			case a.status == http.StatusTooManyRequests:
			case a.status == http.StatusConflict:
				if a.header.Get("Retry-After") == "" {
					bare409++
				}
			case a.ok() && in.result(a) == "":
				nameless = true
			case a.ok():
				ids[in.result(a)] = true
			default:
				refused = true
			}
		}
		n, err := r.count(ctx, in)
		if err != nil {
			return j.skip(err.Error())
		}
		if n < 0 {
			n = len(ids)
		}
		j.ev.Keys, j.ev.Counts = append(j.ev.Keys, in.key), append(j.ev.Counts, n)
		switch {
		case n > 1 || len(ids) > 1:
			dup++
		case end.askedPast > 0:
			unknown++
		case end.gaveUp || end.err != nil:
			stuck++
		case r.cfg.CountCmd == "" && nameless && len(ids) == 0:
			unknown++
		}
		if refused && len(ids)+btoi(nameless) > 0 {
			mixed++
		}
	}
	j.ev.Storms, j.ev.Duplicated = r.cfg.Repeat, dup
	j.ev.Rate = fmt.Sprintf("%d of %d", dup, r.cfg.Repeat)
	for s := range statuses {
		j.ev.Statuses = append(j.ev.Statuses, s)
	}
	slices.Sort(j.ev.Statuses)
	if dup > 0 {
		j.broken("%d of %d storms of %d requests on one key made more than one result (results %v)", dup, r.cfg.Repeat, r.cfg.Storm, j.ev.Counts)
	}
	if stuck > 0 {
		j.graded(Warn, Fail, "%d of %d storms left no result within --settle %s (still 409 or no answer)", stuck, r.cfg.Repeat, r.cfg.Settle)
	}
	if unknown > 0 {
		j.add(Inconclusive, "%d of %d storms ended unseen: 2xx answers that name no result and no --count-cmd, or a Retry-After past --settle", unknown, r.cfg.Repeat)
	}
	if mixed > 0 {
		j.graded(Warn, Fail, "in %d storms one key got a result and a refusal: a duplicate ran and was refused (§2.6 asks the first result, or 409)", mixed)
	}
	if bare409 > 0 {
		j.graded(Info, Fail, "%d 409s without Retry-After: the draft does not ask it, the contract does", bare409)
	}
	if failed > 0 {
		j.add(Warn, "%d answers were 5xx or none: no duplicate, but a lost race should be 409 or the replay (§2.6)", failed)
	}
	return j.result(fmt.Sprintf("%d storms of %d: one result each (answers %s)", r.cfg.Repeat, r.cfg.Storm, histogram(statuses)))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lostResponse hangs up after sending, at a sweep of delays from 0 to
// twice the first answer's latency, then retries as a client would.
func (r *runner) lostResponse(ctx context.Context) Result {
	j := r.judge()
	span := 2 * r.latency
	var unknown []string
	for i := 0; i < r.cfg.Repeat; i++ {
		delay := time.Duration(0)
		if r.cfg.Repeat > 1 {
			delay = span * time.Duration(i) / time.Duration(r.cfg.Repeat-1)
		}
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		if err := r.hangUp(ctx, in, delay); err != nil {
			return j.skip(fmt.Sprintf("could not send the request: %v", err))
		}
		s := r.settle(ctx, in, in.body)
		again := r.send(ctx, in, in.body, quote(in.key))
		// The lost request may commit after the retry's answer: count once
		// more a moment later, and keep the larger.
		n, err := r.count(ctx, in)
		if err == nil && n >= 0 {
			time.Sleep(max(span, 100*time.Millisecond))
			var later int
			if later, err = r.count(ctx, in); later > n {
				n = later
			}
		}
		if err != nil {
			return j.skip(err.Error())
		}
		ms := float64(delay.Round(100*time.Microsecond).Microseconds()) / 1000
		j.ev.Keys, j.ev.DelaysMS = append(j.ev.Keys, in.key), append(j.ev.DelaysMS, ms)
		j.ev.StuckSeconds = append(j.ev.StuckSeconds, s.inProgress.Round(10*time.Millisecond).Seconds())
		if n >= 0 {
			j.ev.Counts = append(j.ev.Counts, n)
		}
		switch {
		case n > 1:
			j.broken("hung up %.0fms after sending: the intent made %d results", ms, n)
		case s.ok() && again.ok() && in.result(s.answer) != "" && in.result(again) != "" && in.result(s.answer) != in.result(again):
			j.broken("hung up %.0fms after sending: two retries got two results (%s, then %s)", ms, in.result(s.answer), in.result(again))
		case s.gaveUp:
			j.graded(Warn, Fail, "hung up %.0fms after sending: the key still answered 409 %s later (--settle): the work died with its client, or holds the key", ms, s.inProgress.Round(100*time.Millisecond))
		case s.askedPast > 0:
			j.add(Inconclusive, "hung up %.0fms after sending: in progress %s, then asked to come back in %s, past --settle %s", ms, s.inProgress.Round(100*time.Millisecond), s.askedPast, r.cfg.Settle)
		case !s.ok():
			j.graded(Warn, Fail, "hung up %.0fms after sending: the retry got %s, want the result", ms, s.answer)
		case n == 0:
			j.add(Fail, "hung up %.0fms after sending: --count-cmd counts no result after a %d", ms, s.status)
		case n < 0:
			unknown = append(unknown, fmt.Sprintf("%.0fms", ms))
		}
	}
	if len(unknown) > 0 {
		j.add(Inconclusive, "cannot count what the lost requests made (hung up at %s): give --count-cmd", strings.Join(unknown, ", "))
	}
	return j.result(fmt.Sprintf("hung up at %s after sending (twice the first answer's %s): one result each; in progress at most %.1fs",
		joinMS(j.ev.DelaysMS), r.latency.Round(time.Millisecond), slices.Max(j.ev.StuckSeconds)))
}

func (r *runner) scope(ctx context.Context) Result {
	j := r.judge()
	if len(r.cfg.OtherActor) == 0 {
		return j.skip("no second actor: give --other-actor-header (e.g. another bearer token)")
	}
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	a := r.send(ctx, in, in.body, quote(in.key))
	if !a.ok() {
		return j.skip(fmt.Sprintf("the first actor's request got %s: nothing to compare with", a))
	}
	// The second actor's own intent: the same nonce, its own setup.
	other, err := r.newIntent(ctx, headerWith(r.cfg.Header, r.cfg.OtherActor), in.vars["nonce"])
	if err != nil {
		return j.skip("the second actor's " + err.Error())
	}
	other.key = in.key
	b := r.send(ctx, other, other.body, quote(in.key))
	c := r.send(ctx, in, in.body, quote(in.key)) // the first actor again
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{a.status, b.status, c.status}, ResultIDs: unique(in.result(a), other.result(b))}
	n := -1
	if len(r.cfg.Setup) == 0 {
		n, err = r.count(ctx, in) // both actors' results share the nonce
	} else if n, err = r.count(ctx, other); n >= 0 {
		n++ // and the first actor's one
	}
	// A leak: the second actor's answer names the first actor's result or
	// resource, or is the first answer's bytes where a result or a count
	// says the second actor made none of its own.
	var leak bool
	for _, id := range in.resultIDs(a) {
		_, v, _ := strings.Cut(id, "=")
		leak = leak || bytes.Contains(b.body, []byte(`"`+v+`"`))
	}
	for name, v := range in.vars {
		leak = leak || (name != "nonce" && other.vars[name] != v && bytes.Contains(b.body, []byte(`"`+v+`"`)))
	}
	leak = leak || (bytes.Equal(a.body, b.body) && (in.result(a) != "" || n == 1))
	if n >= 0 {
		j.ev.Counts = []int{n}
	}
	switch {
	case err != nil:
		j.add(Inconclusive, "%v", err)
	case leak:
		j.broken("the second actor got the first actor's answer (%s): the key leaks one actor's result to another (§5)", b)
	case b.ok() && (n == 2 || (n < 0 && other.result(b) != "")):
		// a result of its own
	case b.ok() && n < 0:
		j.add(Inconclusive, "the second actor got %s, naming no result, and no --count-cmd tells whether it is its own", b)
	case b.ok():
		j.broken("the second actor got %s and the intents made %d results, want 2: one each", b, n)
	default:
		j.graded(Info, Fail, "the second actor got %s for the same key: keys are shared by actors, refused without a leak (a composite key is MAY in §5; the contract keeps keys per actor)", b)
	}
	if !c.ok() || (!bytes.Equal(c.body, a.body) && in.result(c) != in.result(a)) {
		j.broken("after the second actor used the key, the first got %s %s, not its own result", c, in.result(c))
	}
	return j.result("the same key under a second actor made a result of its own; the first actor's stayed")
}

func (r *runner) failureNotStored(ctx context.Context) Result {
	j := r.judge()
	if len(r.cfg.FailHeader) == 0 {
		return j.skip("no way to make the target fail from outside: give --fail-header (a fault knob of a test build)")
	}
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	failing := *in
	failing.header = headerWith(in.header, r.cfg.FailHeader)
	a := r.send(ctx, &failing, in.body, quote(in.key))
	if a.err != nil || a.status < 500 {
		return j.skip(fmt.Sprintf("the request with --fail-header got %s, not a 5xx: nothing to check", a))
	}
	b := r.send(ctx, in, in.body, quote(in.key))
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{a.status, b.status}, ResultIDs: unique(in.result(b))}
	stored := b.status == a.status && (bytes.Equal(b.body, a.body) || (r.replayMark != "" && b.header.Get(r.replayMark) != ""))
	switch {
	case b.ok() && r.cfg.Policy.FailuresStored:
		j.add(Warn, "%d, then the same key ran again (%d): --failures-stored says a failure is stored", a.status, b.status)
	case b.ok():
	case stored && r.cfg.Policy.FailuresStored:
		return j.result(fmt.Sprintf("the %d was stored and replayed, as --failures-stored declares", a.status))
	case stored:
		j.graded(Info, Fail, "the %d was stored: the same key without the fault replays it (§2.6 allows it: \"success or an error\"; the contract releases the key, or a blip sticks; declare --failures-stored)", a.status)
	default:
		j.graded(Warn, Fail, "%d, then %s for the same key without the fault, want it to run again", a.status, b)
	}
	return j.result(strings.TrimSpace(fmt.Sprintf("%d, then the same key ran again: %d %s", a.status, b.status, in.result(b))))
}

// refusalReplayed: a business refusal is an answer, replayed to its key.
func (r *runner) refusalReplayed(ctx context.Context) Result {
	j := r.judge()
	if len(r.cfg.RefusedBody) == 0 && len(r.cfg.Setup) == 0 {
		return j.skip("no --refused-body: give a request the operation refuses (a 4xx it stores)")
	}
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	body := []byte(in.fill(string(r.cfg.RefusedBody), false))
	how := "--refused-body"
	if len(r.cfg.RefusedBody) == 0 {
		// A state change done once, then again under a new key.
		body, how = in.body, "the operation repeated under a new key"
		if a := r.send(ctx, in, body, quote(in.key)); !a.ok() {
			return j.skip(fmt.Sprintf("the operation got %s: nothing to repeat", a))
		}
		in.key = newKey()
	}
	a := r.send(ctx, in, body, quote(in.key))
	if a.err != nil || a.status/100 != 4 || a.status == http.StatusConflict {
		return j.skip(fmt.Sprintf("%s got %s, not a refusal: nothing to replay", how, a))
	}
	b := r.send(ctx, in, body, quote(in.key))
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{a.status, b.status}}
	marked := r.replayMark != "" && b.header.Get(r.replayMark) != ""
	switch {
	case b.status != a.status:
		j.graded(Warn, Fail, "the refusal %d, then %s for its retry: §2.6 asks the previous result, \"success or an error\"", a.status, b)
	case !bytes.Equal(a.body, b.body):
		j.graded(Info, Fail, "the refusal's retry got another body (at %s)", firstDifference(a.body, b.body))
	case r.replayMark != "" && !marked:
		j.graded(Info, Fail, "the refusal's retry was not marked %s: it ran again, the refusal was not stored", r.replayMark)
	case r.replayMark == "":
		j.graded(Pass, Inconclusive, "the same %d again, unmarked: cannot tell a stored refusal from one decided again", a.status)
	}
	return j.result(fmt.Sprintf("%s: %d, and its retry the same %d and bytes", how, a.status, b.status))
}

func (r *runner) expiry(ctx context.Context) Result {
	j := r.judge()
	if r.cfg.TTL == 0 {
		return j.skip("no TTL: give --ttl, the target's key lifetime (the check waits that long)")
	}
	in, err := r.newIntent(ctx, r.cfg.Header, "")
	if err != nil {
		return j.skip(err.Error())
	}
	a := r.send(ctx, in, in.body, quote(in.key))
	if !a.ok() {
		return j.skip(fmt.Sprintf("the first request got %s: nothing to expire", a))
	}
	wait := r.cfg.TTL + time.Second // counted from the answer, so past the target's TTL however it counts
	if !sleep(ctx, wait, time.Now().Add(wait+time.Second)) {
		return j.skip("interrupted")
	}
	b := r.send(ctx, in, in.body, quote(in.key))
	n, err := r.count(ctx, in)
	j.ev = Evidence{Keys: []string{in.key}, Statuses: []int{a.status, b.status}, ResultIDs: unique(in.result(a), in.result(b))}
	if n >= 0 {
		j.ev.Counts = []int{n}
	}
	// A new intent: a second result, or, for a state change, a decision
	// made again (refused, as the state moved on) instead of the replay.
	isNew := n == 2 || (in.result(a) != "" && in.result(b) != "" && in.result(a) != in.result(b)) ||
		(len(r.cfg.Setup) > 0 && b.err == nil && b.status/100 == 4 && b.status != http.StatusConflict && b.status != a.status)
	replays := n == 1 || (in.result(b) != "" && in.result(a) == in.result(b)) ||
		(bytes.Equal(a.body, b.body) && r.replayMark != "" && b.header.Get(r.replayMark) != "")
	switch {
	case err != nil:
		j.add(Inconclusive, "%v", err)
	case isNew:
	case replays:
		j.graded(Warn, Fail, "the key still replays %s after the --ttl of %s: the expiry the target publishes (§2.3) is not the one it keeps", wait, r.cfg.TTL)
	case !b.ok():
		j.graded(Warn, Fail, "%s for the key %s after its TTL, want a new intent", b, wait)
	default:
		j.add(Inconclusive, "cannot tell a new result from a replay: no id, no replay mark, no --count-cmd")
	}
	return j.result(fmt.Sprintf("a new intent %s after the --ttl of %s: %d%s", wait, r.cfg.TTL, b.status, countText(n)))
}

// replayMarkOf is the header of replay, absent from first, whose name
// says replay (Idempotent-Replayed, X-Idempotency-Replayed, …).
func replayMarkOf(first, replay answer) string {
	for name := range replay.header {
		if strings.Contains(strings.ToLower(name), "replay") && first.header.Get(name) == "" {
			return name
		}
	}
	return ""
}

// firstDifference shows where two bodies part: the byte offset and a few
// bytes of each from there.
func firstDifference(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	snip := func(s []byte) string { return fmt.Sprintf("%q", s[i:min(len(s), i+24)]) }
	return fmt.Sprintf("byte %d: %s, then %s", i, snip(a), snip(b))
}

func unique(ids ...string) []string {
	var out []string
	for _, id := range ids {
		if id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func countText(n int) string {
	if n < 0 {
		return ""
	}
	return fmt.Sprintf(" (--count-cmd: %d)", n)
}

func histogram(statuses map[int]int) string {
	var parts []string
	for _, s := range slices.Sorted(func(yield func(int) bool) {
		for s := range statuses {
			if !yield(s) {
				return
			}
		}
	}) {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "none"
		}
		parts = append(parts, fmt.Sprintf("%d×%s", statuses[s], name))
	}
	return strings.Join(parts, ", ")
}

func joinMS(ms []float64) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%.0f", m)
	}
	return strings.Join(parts, ", ") + " ms"
}
