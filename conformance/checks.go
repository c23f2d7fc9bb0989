package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// check is one branch of the contract: a name, what it sends, the draft's
// level and section of what it judges, whether it is a core check (what
// the header is for: a run that cannot see it says nothing), and how.
type check struct {
	name, about    string
	level, section string
	core           bool
	run            func(*runner, context.Context) Result
}

// checks run in this order; first-request, replay and mismatch judge the
// preflight's intent, every other check makes intents of its own.
var checks = []check{
	{"first-request", "the operation once, with a fresh key (the preflight)", "SHOULD", "§2.6", false, (*runner).firstRequest},
	{"key-missing", "the operation without a key", "SHOULD", "§2.7", false, (*runner).keyMissing},
	{"key-malformed", "an unclosed quote; a key outside ASCII", "SHOULD", "§2.1, §5", false, (*runner).keyMalformed},
	{"key-twice", "two key lines", "SHOULD", "§2.1, §5", false, (*runner).keyTwice},
	{"replay", "the preflight's key and body again, twice", "SHOULD", "§2.6", false, (*runner).replay},
	{"mismatch", "the preflight's key with --other-body", "SHOULD", "§2.4, §2.7", false, (*runner).mismatch},
	{"storm", "--storm requests at once on a fresh key, --storms times", "core", "§1, §2.6, §2.7", true, (*runner).storm},
	{"lost-response", "a hang-up after sending, at --hangups delays past the first answer, then retries", "core", "§1, §2.6", true, (*runner).lostResponse},
	{"scope", "one key from two actors (--other-actor-header)", "MAY", "§5", false, (*runner).scope},
	{"failure-not-stored", "a 5xx made by --fail-header, then the key again without it", "MAY", "§2.6", false, (*runner).failureNotStored},
	{"refusal-replayed", "a refusal (--refused-body), then its key again", "SHOULD", "§2.6", false, (*runner).refusalReplayed},
	{"expiry", "a key again after --ttl", "SHOULD", "§2.3", false, (*runner).expiry},
}

// judgement gathers a check's findings; its result is the worst of them.
type judgement struct {
	r        *runner
	c        check
	findings []finding
	ev       Evidence
}

// finding is one thing a check found: its verdict, the level and section
// it is judged by, and why.
type finding struct {
	v              Verdict
	level, section string
	why            string
}

var rank = map[Verdict]int{Skip: 0, Pass: 1, Info: 2, Warn: 3, Inconclusive: 4, Fail: 5}

// byLevel is the draft profile's verdict for a rule of each level: the
// draft's silence (no level) is INFO.
var byLevel = map[string]Verdict{"MUST": Fail, "SHOULD": Warn, "MAY": Info, "": Info}

// judge begins the judgement of the check that runs.
func (r *runner) judge() *judgement { return &judgement{r: r, c: r.current} }

// add records a finding at the check's own level and section.
func (j *judgement) add(v Verdict, format string, args ...any) {
	j.findings = append(j.findings, finding{v, j.c.level, j.c.section, fmt.Sprintf(format, args...)})
}

// broken records what FAILs under every profile: two results for one
// key, or one actor's answer given to another (§1, §2.6, §5).
func (j *judgement) broken(format string, args ...any) {
	j.findings = append(j.findings, finding{Fail, "core", "§1, §2.6", fmt.Sprintf(format, args...)})
}

// rule records a rule of the draft at its level and section: under draft
// a MUST broken is FAIL, a SHOULD WARN, a MAY or the draft's silence INFO;
// under strict it is the contract's verdict, and the line says the
// contract's rule when there is one.
func (j *judgement) rule(level, section string, strict Verdict, contract, format string, args ...any) {
	f := finding{byLevel[level], level, section, fmt.Sprintf(format, args...)}
	if f.level == "" {
		f.level = "silent"
	}
	if j.r.cfg.Profile == ProfileStrict {
		if strict == Pass {
			return
		}
		f.v, f.level = strict, "contract"
		if contract != "" {
			f.why += "; the contract: " + contract
		}
	}
	j.findings = append(j.findings, f)
}

// result is the worst finding first, the others after it, or PASS with
// pass when nothing was found.
func (j *judgement) result(pass string) Result {
	res := Result{Verdict: Pass, Level: j.c.level, Section: j.c.section, Why: pass, Evidence: j.ev}
	if len(j.findings) == 0 {
		return res
	}
	fs := slices.Clone(j.findings)
	slices.SortStableFunc(fs, func(a, b finding) int { return rank[b.v] - rank[a.v] })
	res.Verdict, res.Level, res.Section, res.Why = fs[0].v, fs[0].level, fs[0].section, fs[0].why
	for _, f := range fs[1:] {
		if f.v != Pass {
			res.Why += fmt.Sprintf("; also %s [%s %s]: %s", strings.ToLower(string(f.v)), f.section, f.level, f.why)
		}
	}
	return res
}

func (j *judgement) skip(why string) Result {
	j.findings = []finding{{Skip, j.c.level, j.c.section, why}}
	return j.result("")
}

// preflightSamples is how many first requests the preflight sends, each on
// a fresh key: the lost-response sweep spans past their latency.
const preflightSamples = 5

// preflight sends the operation preflightSamples times, each with a fresh
// key, and the first key twice more (the replay check's retries, which
// also show the replay mark). It refuses a target that cannot be checked:
// unreachable, hanging, the auth refused, no such route, a page, a body it
// refuses; and a --count-cmd that does not count one result (a
// *CountError).
func (r *runner) preflight(ctx context.Context) error {
	for i := range preflightSamples {
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return &UnusableError{err.Error()}
		}
		a := r.send(ctx, in, in.body, quote(in.key))
		if err := r.usable(in, a); err != nil {
			return err
		}
		if n, err := r.count(ctx, in); err != nil {
			return err
		} else if n != -1 && n != 1 {
			return &CountError{Err: fmt.Errorf("it printed %d after the first request's %d, want 1: it counts something else, or the target made no result", n, a.status)}
		}
		in.answer = a
		r.latencies = append(r.latencies, a.elapsed)
		if i == 0 {
			r.first = in
			for range 2 {
				r.replays = append(r.replays, r.settle(ctx, in, in.body).answer)
			}
			r.replayMark = replayMarkOf(a, r.replays[0], r.replays[1])
		}
	}
	return nil
}

// usable refuses an answer the suite cannot check the operation by.
func (r *runner) usable(in *intent, a answer) error {
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
	case strings.HasPrefix(a.header.Get("Content-Type"), "text/html"):
		return &UnusableError{fmt.Sprintf("%s: %d %s, a page, not an API's answer (check --base and --route)", route, a.status, a.header.Get("Content-Type"))}
	case !a.ok():
		return &UnusableError{fmt.Sprintf("%s: %d for --body, want 2xx: give a request the operation accepts%s", route, a.status, withBody(a.body))}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// described reports whether an error answer describes its problem as §2.7
// asks: a problem body (RFC 9457) or a Link to the documentation.
func described(a answer) bool {
	return strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") || a.header.Get("Link") != ""
}

// record is the intent as evidence: its answers' statuses, the results
// they name, and the count n (-1: none).
func (in *intent) record(n int, answers ...answer) IntentRecord {
	rec := IntentRecord{Key: in.key, Nonce: in.vars["nonce"]}
	var ids []string
	for _, a := range answers {
		rec.Statuses = append(rec.Statuses, a.status)
		ids = append(ids, in.resultIDs(a)...)
	}
	rec.ResultIDs = unique(ids...)
	if n >= 0 {
		rec.Count = &n
	}
	return rec
}

func (r *runner) firstRequest(ctx context.Context) Result {
	j := r.judge()
	a := r.first.answer
	j.ev.Intents = []IntentRecord{r.first.record(-1, a)}
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
	j.ev.Intents = []IntentRecord{in.record(-1, a)}
	switch {
	case a.status == http.StatusBadRequest && !described(a):
		j.rule("SHOULD", "§2.7", Fail, "a problem body", "400 without a key, but no problem body and no Link: §2.7 asks a body that points to the documentation")
	case a.status == http.StatusBadRequest:
	case a.ok() && r.cfg.Policy.KeyOptional:
		return j.result(fmt.Sprintf("%d without a key: it ran unprotected, as --key-optional declares", a.status))
	case a.ok():
		j.rule("SHOULD", "§2.7", Fail, "400", "%d without a key: it ran unprotected; §2.7 asks 400 where the operation requires the key (declare --key-optional if it does not)", a.status)
	default:
		j.rule("SHOULD", "§2.7", Fail, "400", "%s without a key, want 400", a)
	}
	return j.result("400 without a key, with a problem body")
}

func (r *runner) keyMalformed(ctx context.Context) Result {
	j := r.judge()
	for _, v := range []string{`"` + newKey(), quote(newKey() + "é")} {
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		in.key = v
		a := r.send(ctx, in, in.body, v)
		j.ev.Intents = append(j.ev.Intents, in.record(-1, a))
		switch {
		case a.status == http.StatusBadRequest:
		case a.ok():
			j.rule("SHOULD", "§2.1, §5", Fail, "400", "%d for the key %s, not an sf-string: the client MUST send one (§2.1), and §5 asks the server to validate the key", a.status, v)
		default:
			j.rule("SHOULD", "§2.1, §5", Fail, "400", "%s for the key %s, want 400", a, v)
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
	j.ev.Intents = []IntentRecord{in.record(-1, a)}
	switch {
	case a.status == http.StatusBadRequest:
		return j.result("400 for two key lines")
	case a.ok():
		j.rule("SHOULD", "§2.1, §5", Fail, "400", "%d for two key lines: it chose one; the field is one sf-string (§2.1)", a.status)
	default:
		j.rule("SHOULD", "§2.1, §5", Fail, "400", "%s for two key lines, want 400", a)
	}
	return j.result("")
}

// perResponse are headers that differ between two answers of one result.
var perResponse = []string{"Date", "Age", "Expires", "Last-Modified", "Content-Length"}

// headerDiff lists the headers of first that a replay does not repeat:
// each of first's headers, unless it differs between the two replays (a
// header of each response, such as a request id) or is the replay mark.
func headerDiff(first, b, c answer, mark string) []string {
	var diff []string
	for _, name := range slices.Sorted(maps.Keys(first.header)) {
		if slices.Contains(perResponse, name) || name == mark || b.header.Get(name) != c.header.Get(name) {
			continue
		}
		if v := first.header.Get(name); b.header.Get(name) != v {
			diff = append(diff, fmt.Sprintf("%s %q, then %q", name, v, b.header.Get(name)))
		}
	}
	return diff
}

func (r *runner) replay(ctx context.Context) Result {
	j := r.judge()
	in := r.first
	first, b := in.answer, r.replays[0]
	n, err := r.count(ctx, in)
	j.ev.Intents = []IntentRecord{in.record(n, append([]answer{first}, r.replays...)...)}
	mark := ", unmarked"
	if r.replayMark != "" {
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
		j.rule("SHOULD", "§2.6", Fail, "the stored status", "the retry got %s, the first request %d: §2.6 asks the previous result", b, first.status)
	case !sameBytes && r.cfg.Policy.Replay == "bytes":
		j.rule("SHOULD", "§2.6", Fail, "replay by bytes", "the retry's body differs from the first answer's at %s (--replay bytes)", firstDifference(first.body, b.body))
	case !sameBytes && in.result(b) == "" && n < 0:
		j.add(Inconclusive, "the retry's body differs, and it names no result: cannot tell a re-rendered replay from a second run (give --count-cmd)")
	case !sameBytes:
		j.add(Info, "the same result, re-rendered (replay by resource): %s", in.result(b)+countText(n))
	case n < 0 && in.result(b) == "":
		j.add(Inconclusive, "the same %d and bytes, but no id, no Location and no --count-cmd: a second run that answers the same cannot be told from a replay", b.status)
	}
	for _, d := range headerDiff(first, b, r.replays[1], r.replayMark) {
		if strings.HasPrefix(d, "Location ") || strings.HasPrefix(d, "Content-Type ") {
			j.rule("SHOULD", "§2.6", Fail, "a replay is the first answer", "the retry's %s: §2.6 asks the previous result", d)
		} else {
			j.rule("", "§2.6", Fail, "a replay is the first answer", "the retry's %s", d)
		}
	}
	return j.result(fmt.Sprintf("the same %d, headers and %d bytes%s, one result%s", b.status, len(b.body), mark, countText(n)))
}

func (r *runner) mismatch(ctx context.Context) Result {
	j := r.judge()
	if len(r.cfg.OtherBody) == 0 {
		return j.skip("no --other-body: give another request the operation accepts")
	}
	in := r.first
	b := r.send(ctx, in, in.other, quote(in.key))
	n, err := r.count(ctx, in)
	j.ev.Intents = []IntentRecord{in.record(n, in.answer, b)}
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
	case b.status == http.StatusUnprocessableEntity && !described(b):
		j.rule("SHOULD", "§2.7", Fail, "a problem body", "422, but no problem body and no Link: §2.7 asks a body that points to the documentation")
	case b.status == http.StatusUnprocessableEntity:
	case b.ok() && sameResult:
		j.rule("SHOULD", "§2.4, §2.7", Fail, "422", "%d with the first answer for another body: no fingerprint (§2.4 makes one MAY), but §2.7 asks 422 for a key reused with another payload", b.status)
	case b.ok():
		j.rule("SHOULD", "§2.7", Fail, "422", "%d for another body under a used key, naming no result: cannot tell whether it ran; §2.7 asks 422", b.status)
		if r.cfg.Profile == ProfileDraft {
			j.add(Inconclusive, "%d for another body, naming no result, and no --count-cmd", b.status)
		}
	default:
		j.rule("SHOULD", "§2.7", Fail, "422", "%s for another body under a used key, want 422", b)
	}
	return j.result("422 with a problem body for another body under a used key")
}

// couldMissStorms is the rarest storm duplicate a run of n clean storms
// finds in at least 19 runs of 20: 1 storm in k, k the largest with
// (1-1/k)^n ≤ 1/20.
func couldMissStorms(n int) int {
	k := 1
	for math.Pow(1-1/float64(k+1), float64(n)) <= 0.05 {
		k++
	}
	return k
}

func (r *runner) storm(ctx context.Context) Result {
	j := r.judge()
	statuses := map[int]int{}
	var dup, unknown, bare409, bare409body, failed, mixed, held int
	var lost, none, stuck []string // storms whose key still answered 409 at --settle, by what the count says
	var perStorm []int
	storms := 0
	for i := 0; i < r.cfg.Storms && !r.stopped(ctx); i++ {
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		storms++
		answers := r.together(ctx, in, r.cfg.Storm)
		end := r.settle(ctx, in, in.body) // the answer a retrying client ends with
		ids, nameless, refused := map[string]bool{}, false, false
		firstOK := -1 // the 2xx that came back first
		for i, a := range answers {
			statuses[a.status]++
			switch {
			case a.err != nil || a.status >= 500:
				failed++
			case a.status == http.StatusTooManyRequests:
			case a.status == http.StatusConflict:
				if a.header.Get("Retry-After") == "" {
					bare409++
				}
				if !described(a) {
					bare409body++
				}
			case a.ok():
				if firstOK < 0 || a.sent.Add(a.elapsed).Before(answers[firstOK].sent.Add(answers[firstOK].elapsed)) {
					firstOK = i
				}
				if id := in.result(a); id != "" {
					ids[id] = true
				} else {
					nameless = true
				}
			default:
				refused = true
			}
		}
		n, err := r.count(ctx, in)
		if err != nil {
			j.add(Inconclusive, "%v", err)
			break
		}
		countSays := n
		if n < 0 {
			n = len(ids)
		}
		j.ev.Intents = append(j.ev.Intents, in.record(countSays, append(answers, end.answer)...))
		perStorm = append(perStorm, n)
		// Held: a duplicate sent while the first request was at work, given
		// the first's result when it finished instead of a 409. A finding
		// only where no storm got a 409: under load a duplicate can reach
		// the target after the first finished, and be replayed rightly.
		if firstOK >= 0 && n == 1 && (countSays == 1 || len(ids) == 1) {
			f := answers[firstOK]
			for i, a := range answers {
				if i != firstOK && a.ok() && a.sent.Before(f.sent.Add(f.elapsed)) && a.elapsed >= f.elapsed/2 {
					held++
				}
			}
		}
		switch {
		case n > 1 || len(ids) > 1:
			dup++
		case end.gaveUp || (end.err != nil && end.askedPast == 0):
			switch {
			case countSays > 0:
				lost = append(lost, in.key)
			case countSays == 0:
				none = append(none, in.key)
			default:
				stuck = append(stuck, in.key)
			}
		case end.askedPast > 0:
			unknown++
		case r.cfg.CountCmd == "" && nameless && len(ids) == 0:
			unknown++
		}
		if refused && len(ids)+btoi(nameless) > 0 {
			mixed++
		}
	}
	k := couldMissStorms(storms)
	j.ev.Storms, j.ev.Duplicated = storms, dup
	j.ev.CouldMiss = fmt.Sprintf("a duplicate rarer than 1 storm in %d (%d clean storms find that rate in at least 19 runs of 20)", k, storms)
	saw := fmt.Sprintf("%d storms of %d requests, results per storm %v, answers %s", storms, r.cfg.Storm, perStorm, histogram(statuses))
	if dup > 0 {
		j.broken("%d of %d storms made more than one result: %s", dup, storms, saw)
	}
	if len(lost) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "a key answers with its result", "lost results: in %d storms the work made its result (--count-cmd) but the key still answered 409 at --settle %s: no client gets the answer, and a retry after the key expires makes a second (%s)", len(lost), r.cfg.Settle, strings.Join(lost, ", "))
	}
	if len(none) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "a key answers with its result", "in %d storms no request made a result (--count-cmd: 0) and the key still answered 409 at --settle %s (%s)", len(none), r.cfg.Settle, strings.Join(none, ", "))
	}
	if len(stuck) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "a key answers with its result", "in %d storms the key still answered 409 (or nothing) at --settle %s; without --count-cmd, whether the work made a result is unseen (%s)", len(stuck), r.cfg.Settle, strings.Join(stuck, ", "))
	}
	if unknown > 0 {
		j.add(Inconclusive, "%d of %d storms ended unseen (2xx answers that name no result and no --count-cmd, or a Retry-After past --settle): %s", unknown, storms, saw)
	}
	if mixed > 0 {
		j.rule("SHOULD", "§2.6", Fail, "one answer per key", "in %d storms one key got a result and a refusal: a duplicate ran and was refused; §2.6 asks the first result, or 409", mixed)
	}
	if held > 0 && statuses[http.StatusConflict] == 0 {
		j.rule("SHOULD", "§2.6, §2.7", Pass, "", "%d duplicates sent while the first request was at work waited and got its result, not 409: §2.6 asks a conflict for a concurrent request", held)
	}
	if bare409body > 0 {
		j.rule("SHOULD", "§2.7", Fail, "a problem body", "%d 409s without a problem body or Link: §2.7 asks a body describing the problem", bare409body)
	}
	if bare409 > 0 {
		j.rule("", "§2.7", Fail, "a 409 says when to come back (Retry-After)", "%d 409s without Retry-After (the draft does not ask it)", bare409)
	}
	if failed > 0 {
		j.rule("SHOULD", "§2.6", Warn, "", "%d answers were 5xx or none: no duplicate, but §2.6 asks a concurrent request a 409, or the result", failed)
	}
	return j.result(fmt.Sprintf("%s: one result each; could miss %s", saw, j.ev.CouldMiss))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sweep is the lost-response check's hang-up delays: n, evenly from 0 to
// half again past the median of the preflight's first answers, so that
// the step between two is small beside the work.
func (r *runner) sweep(n int) (delays []time.Duration, median, span time.Duration) {
	lat := slices.Sorted(slices.Values(r.latencies))
	median = lat[len(lat)/2]
	span = median * 3 / 2
	for i := range n {
		d := time.Duration(0)
		if n > 1 {
			d = span * time.Duration(i) / time.Duration(n-1)
		}
		delays = append(delays, d)
	}
	return delays, median, span
}

// lostResponse hangs up after sending, at each delay of the sweep, then
// retries as a client would, and counts what the intent made.
func (r *runner) lostResponse(ctx context.Context) Result {
	j := r.judge()
	delays, median, span := r.sweep(r.cfg.HangUps)
	step := time.Duration(0)
	if len(delays) > 1 {
		step = delays[1]
	}
	var unknown, lost, died, stuck []string
	var most time.Duration
	for _, delay := range delays {
		if r.stopped(ctx) {
			break
		}
		in, err := r.newIntent(ctx, r.cfg.Header, "")
		if err != nil {
			return j.skip(err.Error())
		}
		if err := r.hangUp(ctx, in, delay); err != nil {
			r.mu.Lock()
			r.down = err
			r.mu.Unlock()
			continue
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
			j.add(Inconclusive, "%v", err)
			break
		}
		ms := fmt.Sprintf("%.1fms", float64(delay.Microseconds())/1000)
		rec := in.record(n, s.answer, again)
		d, p := float64(delay.Microseconds())/1000, s.inProgress.Round(10*time.Millisecond).Seconds()
		rec.DelayMS, rec.InProgressS = &d, &p
		j.ev.Intents = append(j.ev.Intents, rec)
		j.ev.HangUps++
		most = max(most, s.inProgress)
		switch {
		case n > 1:
			j.broken("hung up %s after sending: the intent made %d results (key %s)", ms, n, in.key)
		case s.ok() && again.ok() && in.result(s.answer) != "" && in.result(again) != "" && in.result(s.answer) != in.result(again):
			j.broken("hung up %s after sending: two retries got two results (%s, then %s; key %s)", ms, in.result(s.answer), in.result(again), in.key)
		case s.gaveUp && n > 0:
			lost = append(lost, ms)
		case s.gaveUp && n == 0:
			died = append(died, ms)
		case s.gaveUp:
			stuck = append(stuck, ms)
		case s.askedPast > 0:
			j.add(Inconclusive, "hung up %s after sending: in progress %s, then asked to come back in %s, past --settle %s", ms, s.inProgress.Round(100*time.Millisecond), s.askedPast, r.cfg.Settle)
		case !s.ok():
			j.rule("SHOULD", "§2.6", Fail, "the retry gets the result", "hung up %s after sending: the retry got %s, want the result", ms, s.answer)
		case n == 0:
			j.add(Fail, "hung up %s after sending: --count-cmd counts no result after the retry's %d (key %s)", ms, s.status, in.key)
		case n < 0:
			unknown = append(unknown, ms)
		}
	}
	if len(lost) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "a key answers with its result", "lost results: hung up at %s, the work made its result (--count-cmd) but the key still answered 409 at --settle %s: the client never gets its answer, and a retry after the key expires makes a second", strings.Join(lost, ", "), r.cfg.Settle)
	}
	if len(died) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "the work outlives its client", "hung up at %s: the work died with its client (--count-cmd: 0) and the key still answered 409 at --settle %s: every retry is refused until it expires", strings.Join(died, ", "), r.cfg.Settle)
	}
	if len(stuck) > 0 {
		j.rule("SHOULD", "§2.6", Fail, "a key answers with its result", "hung up at %s: the key still answered 409 at --settle %s; without --count-cmd, whether the work made a result is unseen", strings.Join(stuck, ", "), r.cfg.Settle)
	}
	if len(unknown) > 0 {
		j.add(Inconclusive, "cannot count what the lost requests made (hung up at %s): give --count-cmd", strings.Join(unknown, ", "))
	}
	j.ev.CouldMiss = fmt.Sprintf("a hang-up window narrower than %s (the sweep's step), or past %s", step.Round(100*time.Microsecond), span.Round(time.Millisecond))
	return j.result(fmt.Sprintf("%d hang-ups from 0 to %s after sending, every %s (half again past the median first answer, %s of %d): one result each, in progress at most %.1fs; could miss %s",
		j.ev.HangUps, span.Round(time.Millisecond), step.Round(100*time.Microsecond), median.Round(time.Millisecond), len(r.latencies), most.Seconds(), j.ev.CouldMiss))
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
	n := -1
	if len(r.cfg.Setup) == 0 {
		n, err = r.count(ctx, in) // both actors' results share the nonce
	} else if n, err = r.count(ctx, other); n >= 0 {
		n++ // and the first actor's one
	}
	j.ev.Intents = []IntentRecord{in.record(-1, a, c), other.record(n, b)}
	// A leak: the second actor's answer names the first actor's result or
	// resource, or is the first answer's bytes where a result or a count
	// says the second actor made none of its own.
	var leak bool
	for _, id := range in.resultIDs(a) {
		_, v, _ := strings.Cut(id, "=")
		leak = leak || bytes.Contains(b.body, []byte(`"`+v+`"`)) || (b.header.Get("Location") != "" && b.header.Get("Location") == a.header.Get("Location"))
	}
	for name, v := range in.vars {
		leak = leak || (name != "nonce" && other.vars[name] != v && bytes.Contains(b.body, []byte(`"`+v+`"`)))
	}
	leak = leak || (len(a.body) > 0 && bytes.Equal(a.body, b.body) && (in.result(a) != "" || n == 1))
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
		j.rule("MAY", "§5", Fail, "keys per actor", "the second actor got %s for the same key: keys are shared by actors, refused without a leak (§5 makes a composite key MAY)", b)
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
	j.ev.Intents = []IntentRecord{in.record(-1, a, b)}
	stored := b.status == a.status && (bytes.Equal(b.body, a.body) || (r.replayMark != "" && b.header.Get(r.replayMark) != ""))
	switch {
	case b.ok() && r.cfg.Policy.FailuresStored:
		j.add(Warn, "%d, then the same key ran again (%d): --failures-stored says a failure is stored", a.status, b.status)
	case b.ok():
	case stored && r.cfg.Policy.FailuresStored:
		return j.result(fmt.Sprintf("the %d was stored and replayed, as --failures-stored declares", a.status))
	case stored:
		j.rule("MAY", "§2.6", Fail, "a 5xx releases the key, or a blip sticks", "the %d was stored: the same key without the fault replays it (§2.6 allows it: \"success or an error\"; declare --failures-stored)", a.status)
	default:
		j.rule("SHOULD", "§2.6", Fail, "the key runs again", "%d, then %s for the same key without the fault, want it to run again", a.status, b)
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
	j.ev.Intents = []IntentRecord{in.record(-1, a, b)}
	marked := r.replayMark != "" && b.header.Get(r.replayMark) != ""
	switch {
	case b.status != a.status:
		j.rule("SHOULD", "§2.6", Fail, "a refusal is stored", "the refusal %d, then %s for its retry: §2.6 asks the previous result, \"success or an error\"", a.status, b)
	case !bytes.Equal(a.body, b.body):
		j.rule("", "§2.6", Fail, "a refusal is stored", "the refusal's retry got another body (at %s)", firstDifference(a.body, b.body))
	case r.replayMark != "" && !marked:
		j.rule("", "§2.6", Fail, "a refusal is stored", "the refusal's retry was not marked %s: it ran again, the refusal was not stored", r.replayMark)
	case r.replayMark == "" && r.cfg.Profile == ProfileStrict:
		j.add(Inconclusive, "the same %d again, unmarked: cannot tell a stored refusal from one decided again", a.status)
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
	j.ev.Intents = []IntentRecord{in.record(n, a, b)}
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
		j.rule("SHOULD", "§2.3", Fail, "a key expires at its TTL", "the key still replays %s after the --ttl of %s: the expiry the target publishes (§2.3) is not the one it keeps", wait, r.cfg.TTL)
	case !b.ok():
		j.rule("SHOULD", "§2.3", Fail, "a key expires at its TTL", "%s for the key %s after its TTL, want a new intent", b, wait)
	default:
		j.add(Inconclusive, "cannot tell a new result from a replay: no id, no replay mark, no --count-cmd")
	}
	return j.result(fmt.Sprintf("a new intent %s after the --ttl of %s: %d%s", wait, r.cfg.TTL, b.status, countText(n)))
}

// replayMarkOf is the header that marks a replay: one that both retries
// carry with the same value, and the first answer lacks or has with
// another (Idempotent-Replayed, X-Cache: HIT, Idempotency-Status:
// replayed). A header of each response (a request id) differs between the
// retries, and is not one. A name that says replay wins a tie.
func replayMarkOf(first, b, c answer) string {
	var marks []string
	for _, name := range slices.Sorted(maps.Keys(b.header)) {
		v := b.header.Get(name)
		if !slices.Contains(perResponse, name) && v != "" && c.header.Get(name) == v && first.header.Get(name) != v {
			marks = append(marks, name)
		}
	}
	for _, name := range marks {
		if strings.Contains(strings.ToLower(name), "replay") {
			return name
		}
	}
	if len(marks) > 0 {
		return marks[0]
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
