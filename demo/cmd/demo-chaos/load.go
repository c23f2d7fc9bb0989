package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/demo-api/demo-api/api/client"
)

// The clients' time: each Send (one replica) gets the client's budget, and
// an intent, moving between replicas, twice that.
const (
	sendBudget   = 5 * time.Second
	intentBudget = 2 * sendBudget
)

// intent is one intent as its client saw it.
type intent struct {
	it        *client.Intent
	topic     string
	note      string // unique in the campaign: it finds the intent's business rows
	outcome   string // created, refused, unknown
	requestID string // when created: the requestId the client got
	body      []byte // when created: the bytes of the answer the client got
	refusal   string // when refused: what the server said
	hops      int    // how often it moved to the other replica
	started   time.Time
	answered  time.Time
}

// pacer hands out a scenario's intents: evenly over the scenario's
// timeline (a tick at a time), and once the timeline is over, what is left
// of the quota at once.
type pacer struct {
	quota  int64
	issued atomic.Int64
	tick   *time.Ticker
	over   chan struct{} // closed when the timeline ends
}

func newPacer(quota int, timeline time.Duration) *pacer {
	every := max(timeline/time.Duration(max(quota, 1)), 100*time.Microsecond)
	return &pacer{quota: int64(quota), tick: time.NewTicker(every), over: make(chan struct{})}
}

// take waits for the next intent's turn; false: no more intents.
func (p *pacer) take(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-p.tick.C:
	case <-p.over:
	}
	n := p.issued.Add(1)
	select {
	case <-p.over:
		return n <= p.quota
	default:
		return true
	}
}

func (p *pacer) end() {
	close(p.over)
	p.tick.Stop()
}

// answers keeps, per key, the bytes of the last 2xx answer to a create that
// reached a client: the client takes the first 2xx it can decode, so once
// Send succeeds this is the answer it got.
type answers struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (a *answers) take(key string) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.m[key]
	delete(a.m, key)
	return b
}

// recorder is the clients' transport: it reads each 2xx answer to a create
// whole and keeps its bytes in answers, and counts each create's answer in
// timeline (if any).
type recorder struct {
	next     http.RoundTripper
	answers  *answers
	timeline *timeline
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := r.next.RoundTrip(req)
	if req.Method == http.MethodPost {
		r.timeline.add(resp, err)
		if err == nil {
			r.timeline.success(sent, resp)
		}
	}
	if err != nil || req.Method != http.MethodPost || resp.StatusCode/100 != 2 {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.answers.mu.Lock()
	r.answers.m[req.Header.Get("Idempotency-Key")] = body
	r.answers.mu.Unlock()
	return resp, nil
}

// errHop cancels a Send that met a transport error, so that the intent
// moves to the other replica.
var errHop = errors.New("transport error: on to the other replica")

// worker sends intents one after another, each through a client of either
// replica: it starts on one, and after a transport error (the replica
// refuses connections, or does not answer in time) or a spent budget it
// sends the same intent, with the same key and bytes, to the other one.
type worker struct {
	clients [2]*client.Client
	answers *answers
	hop     context.CancelCauseFunc // the current Send's
}

func newWorker(e *env, hc *http.Client, ans *answers, t *tally) (*worker, error) {
	w := &worker{answers: ans}
	for i, r := range e.replicas {
		c, err := client.New(client.Config{BaseURL: r.url, Token: token, Budget: sendBudget, HTTPClient: hc,
			OnAttempt: func(a client.Attempt) {
				if t != nil {
					t.attempt(a)
				}
				if a.Status == 0 && a.Err != nil && w.hop != nil {
					w.hop(errHop)
				}
			}})
		if err != nil {
			return nil, err
		}
		w.clients[i] = c
	}
	return w, nil
}

// send sends in, starting at replica first, until it gets a definite
// answer or intentBudget passes.
func (w *worker) send(ctx context.Context, in *intent, first int) {
	deadline := time.Now().Add(intentBudget)
	for r := first; ; r = 1 - r {
		hctx, hop := context.WithCancelCause(ctx)
		sctx, cancel := context.WithDeadline(hctx, deadline)
		w.hop = hop
		res, err := w.clients[r].Send(sctx, in.it)
		hopped := context.Cause(hctx) == errHop
		w.hop = nil
		cancel()
		hop(nil)
		in.answered = time.Now()
		var refusal *client.ProblemError
		switch {
		case err == nil:
			in.outcome, in.requestID, in.body = "created", res.Request.RequestID, w.answers.take(in.it.Key)
			return
		case errors.As(err, &refusal):
			in.outcome, in.refusal = "refused", strconv.Itoa(refusal.Status)+" "+refusal.Code
			return
		case ctx.Err() != nil || time.Until(deadline) < 100*time.Millisecond:
			in.outcome = "unknown"
			return
		}
		in.hops++
		if hopped { // the other replica may be down too: do not spin
			sleepCtx(ctx, 50*time.Millisecond+rand.N(50*time.Millisecond))
		}
	}
}

// tally counts what the clients saw, attempt by attempt.
type tally struct {
	mu       sync.Mutex
	statuses map[string]int       // "503", "409", "429", "no answer", …
	first409 map[string]time.Time // by key
	blocked  time.Duration        // the longest first 409 → definite answer
	// After the heal: the longest time from the heal (or a later first
	// 409) to a definite answer, for keys whose owner may have died (an
	// attempt broke under the request: its replica was killed) and for the
	// others. A dead owner's claim waits for its lease by design; a live
	// one's must be released as soon as the database answers.
	healedAt                      time.Time
	ownerDied                     map[string]bool // by key
	afterHealAlive, afterHealDied time.Duration
}

func newTally() *tally {
	return &tally{statuses: map[string]int{}, first409: map[string]time.Time{}, ownerDied: map[string]bool{}}
}

// heal notes when the fault healed.
func (t *tally) heal(at time.Time) {
	t.mu.Lock()
	t.healedAt = at
	t.mu.Unlock()
}

func (t *tally) attempt(a client.Attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case a.Status == 0 && errors.Is(a.Err, context.Canceled):
		// the worker moved the intent to the other replica
	case a.Status == 0:
		why := noAnswer(a.Err)
		t.statuses[why]++
		if why == "broken" {
			t.ownerDied[a.Intent] = true
		}
	case a.Status == http.StatusConflict:
		t.statuses["409"]++
		if _, ok := t.first409[a.Intent]; !ok {
			t.first409[a.Intent] = time.Now()
		}
	case a.Status >= 500, a.Status == http.StatusTooManyRequests:
		t.statuses[strconv.Itoa(a.Status)]++
	}
}

// noAnswer names why an attempt got no answer.
func noAnswer(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "broken" // reset, EOF: the connection broke under the request
}

// answered notes that key got a definite answer at at.
func (t *tally) answered(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first, ok := t.first409[key]
	if !ok {
		return
	}
	t.blocked = max(t.blocked, at.Sub(first))
	if t.healedAt.IsZero() || !at.After(t.healedAt) {
		return
	}
	from := t.healedAt
	if first.After(from) {
		from = first
	}
	b := at.Sub(from)
	if t.ownerDied[key] {
		t.afterHealDied = max(t.afterHealDied, b)
	} else {
		t.afterHealAlive = max(t.afterHealAlive, b)
	}
}
