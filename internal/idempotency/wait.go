package idempotency

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// pollInterval is about how often one waiter of a key asks the store, for an owner on another replica.
const pollInterval = time.Second

// waiters hands a key's owner's answer to the requests here that wait for it (Prefer: wait).
type waiters struct {
	clock func() time.Time // the Runner's
	mu    sync.Mutex
	m     map[Scope]*waitEntry
}

type waitEntry struct {
	done     chan struct{}
	resp     *Response // the owner's answer, nil if it released its claim
	n        int       // waiters registered, while not woken
	nextPoll time.Time // when one of the waiters may ask the store again
}

// waitEnd says how a wait ended.
type waitEnd int

const (
	timedOut waitEnd = iota // its time passed
	answered                // the owner in this process handed its answer over
	released                // the owner in this process let go: run the statement again
	poll                    // this waiter's turn to read the key (the owner may run elsewhere)
	left                    // the client left
)

// await waits on s until until for the answer of the attempt that owns it.
func (w *waiters) await(ctx context.Context, s Scope, until time.Time) (*Response, waitEnd) {
	w.mu.Lock()
	e, ok := w.m[s]
	if !ok {
		e = &waitEntry{done: make(chan struct{})}
		w.m[s] = e
	}
	e.n++
	w.mu.Unlock()
	defer func() { // the last waiter removes the entry, unless a wake did
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.n--; e.n == 0 && w.m[s] == e {
			delete(w.m, s)
		}
	}()
	for {
		switch {
		case ctx.Err() != nil:
			return nil, left
		case !w.clock().Before(until):
			return nil, timedOut
		case w.wait(ctx, e, until):
			if e.resp == nil {
				return nil, released
			}
			return e.resp, answered
		case w.takePoll(e):
			return nil, poll
		}
	}
}

// wait blocks until e is woken (true), a jittered pollInterval or until passes, or ctx ends.
func (w *waiters) wait(ctx context.Context, e *waitEntry, until time.Time) bool {
	poll := time.Duration(float64(pollInterval) * (0.5 + rand.Float64()))
	t := time.NewTimer(min(until.Sub(w.clock()), poll))
	defer t.Stop()
	select {
	case <-e.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// takePoll reports whether the caller is the one waiter of e that asks the store now.
func (w *waiters) takePoll(e *waitEntry) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := w.clock(); now.After(e.nextPoll) {
		e.nextPoll = now.Add(pollInterval)
		return true
	}
	return false
}

// wake releases the requests waiting on s with the owner's answer (nil: it released its claim).
func (w *waiters) wake(s Scope, resp *Response) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.m[s]; ok {
		e.resp = resp
		close(e.done)
		delete(w.m, s)
	}
}
