package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Each check returns its verdict and why, in one line.

func (r *runner) keyMissing(ctx context.Context) (Verdict, string) {
	a := r.send(ctx, r.cfg.Body, r.cfg.Header)
	switch {
	case a.status == http.StatusBadRequest:
		return Pass, "400 without the key"
	case a.ok():
		return Fail, fmt.Sprintf("%s without the key: it ran unprotected, want 400", a)
	}
	return Fail, fmt.Sprintf("%s without the key, want 400", a)
}

func (r *runner) keyMalformed(ctx context.Context) (Verdict, string) {
	malformed := []string{
		`"` + newKey(),        // a quoted string never closed
		quote(newKey() + "é"), // a letter outside ASCII
	}
	var wrong []string
	for _, v := range malformed {
		if a := r.send(ctx, r.cfg.Body, r.cfg.Header, v); a.status != http.StatusBadRequest {
			wrong = append(wrong, fmt.Sprintf("%s: %s", v, a))
		}
	}
	if len(wrong) > 0 {
		return Fail, "want 400 for a malformed key; got " + strings.Join(wrong, "; ")
	}
	return Pass, "400 for an unclosed quote and for a key outside ASCII"
}

func (r *runner) keyTwice(ctx context.Context) (Verdict, string) {
	a := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(newKey()), quote(newKey()))
	switch {
	case a.status == http.StatusBadRequest:
		return Pass, "400 for two keys in one request"
	case a.ok():
		return Fail, fmt.Sprintf("%s for two keys in one request: it chose one, want 400", a)
	}
	return Fail, fmt.Sprintf("%s for two keys in one request, want 400", a)
}

func (r *runner) firstRequest(ctx context.Context) (Verdict, string) {
	r.firstKey = newKey()
	a := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(r.firstKey))
	if !a.ok() {
		return Fail, fmt.Sprintf("%s for a fresh key, want 2xx (is --body a request the API accepts?)", a)
	}
	r.first = &a
	return Pass, fmt.Sprintf("%d, %d bytes, %s", a.status, len(a.body), a.shortID())
}

func (r *runner) replay(ctx context.Context) (Verdict, string) {
	if r.first == nil {
		return Skip, "no first result to replay (first-request failed)"
	}
	first := *r.first
	b := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(r.firstKey))
	switch {
	case b.err != nil || b.status != first.status:
		return Fail, fmt.Sprintf("the retry got %s, the first request %d", b, first.status)
	case !bytes.Equal(b.body, first.body):
		return Fail, "the retry's body differs from the first answer's at " + firstDifference(first.body, b.body)
	case b.id() != first.id():
		return Fail, fmt.Sprintf("the retry names %s, the first answer %s", b.shortID(), first.shortID())
	}
	mark := "no replay header (optional)"
	if r.replayMark = replayMarkOf(first, b); r.replayMark != "" {
		mark = "marked " + r.replayMark + ": " + b.header.Get(r.replayMark)
	}
	return Pass, fmt.Sprintf("the same %d and %d bytes; %s", b.status, len(b.body), mark)
}

func (r *runner) mismatch(ctx context.Context) (Verdict, string) {
	if r.first == nil {
		return Skip, "no first result to reuse the key of (first-request failed)"
	}
	b := r.send(ctx, r.cfg.OtherBody, r.cfg.Header, quote(r.firstKey))
	switch {
	case b.status == http.StatusUnprocessableEntity:
		return Pass, "422 for another body under a used key"
	case b.status == http.StatusConflict:
		return Warn, "409 for another body under a used key: the older habit; the draft asks 422, since a 409 says retry and a retry never helps"
	case b.ok() && b.same(*r.first):
		return Fail, fmt.Sprintf("%s with the first answer for another body: the key has no fingerprint of the request", b)
	case b.ok():
		return Fail, fmt.Sprintf("%s with a second result (%s) for another body under a used key", b, b.shortID())
	}
	return Fail, fmt.Sprintf("%s for another body under a used key, want 422", b)
}

func (r *runner) storm(ctx context.Context) (Verdict, string) {
	var conflicts, bare409, failed, limited, results int
	for i := 1; i <= r.cfg.Repeat; i++ {
		key := newKey()
		answers := r.together(ctx, r.cfg.Storm, key)
		// Then the answer a retrying client ends with, once the key settled.
		answers = append(answers, r.settle(ctx, key, r.cfg.Body, r.cfg.Header))
		distinct := map[string]bool{}
		for _, a := range answers {
			switch {
			case a.err != nil || a.status >= 500:
				failed++
			case a.status == http.StatusConflict:
				conflicts++
				if a.header.Get("Retry-After") == "" {
					bare409++
				}
			case a.status == http.StatusTooManyRequests:
				limited++ // a rate limit stores nothing: no result
			default:
				results++
				distinct[a.result()] = true
			}
		}
		switch {
		case len(distinct) > 1:
			return Fail, fmt.Sprintf("storm %d of %d: %d requests on one key made %d results: it ran more than once", i, r.cfg.Repeat, r.cfg.Storm, len(distinct))
		case len(distinct) == 0:
			return Fail, fmt.Sprintf("storm %d of %d: no result within %s (answers 409 or failed)", i, r.cfg.Repeat, r.cfg.Settle)
		}
	}
	summary := fmt.Sprintf("%d storms of %d: one result each (%d answers carried it, %d were 409", r.cfg.Repeat, r.cfg.Storm, results, conflicts)
	if limited > 0 {
		summary += fmt.Sprintf(", %d were 429", limited)
	}
	if failed > 0 {
		summary += fmt.Sprintf(", %d failed", failed)
	}
	summary += ")"
	switch {
	case bare409 > 0:
		return Warn, summary + fmt.Sprintf("; %d 409s without Retry-After: the draft does not ask for it, the contract does, so a client knows when to ask again", bare409)
	case failed > 0:
		return Warn, summary + "; a failure is no duplicate, but a lost race should be a 409 or the replay"
	}
	return Pass, summary
}

// lostRetryAfter is how long after hanging up the lost-response check
// retries.
const lostRetryAfter = time.Second

func (r *runner) lostResponse(ctx context.Context) (Verdict, string) {
	replayed := 0
	for i := 1; i <= r.cfg.Repeat; i++ {
		key := newKey()
		if err := r.hangUp(ctx, key); err != nil {
			return Fail, fmt.Sprintf("attempt %d: could not send the request: %v", i, err)
		}
		// The client retries a moment later, as after its timeout: the
		// answer it lost had been written. A retry that meets the first
		// request still running is the storm's case.
		select {
		case <-time.After(lostRetryAfter):
		case <-ctx.Done():
			return Skip, "interrupted"
		}
		a := r.settle(ctx, key, r.cfg.Body, r.cfg.Header)
		if a.status == http.StatusConflict {
			return Fail, fmt.Sprintf("attempt %d: the key still answers 409 %s after its client hung up: the work died with the connection", i, r.cfg.Settle)
		}
		if !a.ok() {
			return Fail, fmt.Sprintf("attempt %d: the retry after a lost response got %s, want the result", i, a)
		}
		b := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key))
		if !b.ok() || !b.same(a) {
			return Fail, fmt.Sprintf("attempt %d: two retries got two results (%s, then %s %s)", i, a.shortID(), b, b.shortID())
		}
		if r.replayMark != "" && a.header.Get(r.replayMark) != "" {
			replayed++
		}
	}
	why := fmt.Sprintf("%d requests hung up on, each retried %s later: one result each, kept", r.cfg.Repeat, lostRetryAfter)
	if r.replayMark != "" {
		why += fmt.Sprintf(" (%d of them a replay of the lost answer)", replayed)
	}
	return Pass, why
}

func (r *runner) scope(ctx context.Context) (Verdict, string) {
	if len(r.cfg.OtherActor) == 0 {
		return Skip, "no second actor: give --other-actor-header (e.g. another bearer token)"
	}
	key := newKey()
	a := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key))
	if !a.ok() {
		return Skip, fmt.Sprintf("the first actor's request got %s: nothing to compare with", a)
	}
	b := r.send(ctx, r.cfg.Body, headerWith(r.cfg.Header, r.cfg.OtherActor), quote(key))
	if !b.ok() {
		return Fail, fmt.Sprintf("the second actor got %s for a key the first one used: a key is its actor's own", b)
	}
	isNew, known := r.isNew(a, b)
	switch {
	case !known:
		return Warn, "cannot tell the second actor's result from the first's: no id in the body or Location, no replay header, the same bytes"
	case !isNew:
		return Fail, fmt.Sprintf("the second actor got the first actor's result (%s): the key is global, and it leaks one actor's answer to another", a.shortID())
	}
	if c := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key)); !c.ok() || !c.same(a) {
		return Fail, fmt.Sprintf("after the second actor used the key, the first got %s %s, not its own result", c, c.shortID())
	}
	return Pass, "the same key under a second actor made a result of its own; the first actor's stayed"
}

func (r *runner) expiry(ctx context.Context) (Verdict, string) {
	if r.cfg.TTL == 0 {
		return Skip, "no TTL: give --ttl, the target's key lifetime (the check waits that long)"
	}
	key := newKey()
	a := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key))
	if !a.ok() {
		return Skip, fmt.Sprintf("the first request got %s: nothing to expire", a)
	}
	wait := r.cfg.TTL + time.Second // counted from the answer, so past the target's TTL however it counts
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return Skip, "interrupted"
	}
	b := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key))
	if !b.ok() {
		return Fail, fmt.Sprintf("%s for the key %s after its TTL, want a new result", b, wait)
	}
	isNew, known := r.isNew(a, b)
	switch {
	case !known:
		return Warn, "cannot tell a new result from a replay: no id in the body or Location, no replay header, the same bytes"
	case !isNew:
		return Fail, fmt.Sprintf("the key still replays %s %s after its TTL of %s", a.shortID(), wait, r.cfg.TTL)
	}
	return Pass, fmt.Sprintf("a new result %s after the TTL of %s (%s)", wait, r.cfg.TTL, b.shortID())
}

func (r *runner) failureNotStored(ctx context.Context) (Verdict, string) {
	if len(r.cfg.FailHeader) == 0 {
		return Skip, "no way to make the target fail from outside: give --fail-header (a fault knob of a test build)"
	}
	key := newKey()
	a := r.send(ctx, r.cfg.Body, headerWith(r.cfg.Header, r.cfg.FailHeader), quote(key))
	if a.err != nil || a.status < 500 {
		return Skip, fmt.Sprintf("the request with --fail-header got %s, not a 5xx: nothing to check", a)
	}
	b := r.send(ctx, r.cfg.Body, r.cfg.Header, quote(key))
	switch {
	case b.ok():
		return Pass, fmt.Sprintf("%d, then the same key ran again: %d, %s", a.status, b.status, b.shortID())
	case b.status == a.status && (bytes.Equal(b.body, a.body) || (r.replayMark != "" && b.header.Get(r.replayMark) != "")):
		return Fail, fmt.Sprintf("the %d was stored: the same key without the fault replays it, and a blip sticks", a.status)
	}
	return Fail, fmt.Sprintf("%d, then %s for the same key without the fault, want it to run again", a.status, b)
}
