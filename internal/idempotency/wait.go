package idempotency

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

const (
	maxWait      = 10 * time.Second // caps Request.Wait
	pollInterval = time.Second      // about how often a waiting request reads its key again
)

// Waits is Prefer: wait, a layer around the Runner's Do: a request that
// meets its key held by another attempt waits for that attempt's answer
// instead of answering 409, at most req.Wait, holding no connection, and
// then asks again: a replay if the owner answered, its own run if the owner
// let go. Past the owner's deadline the owner is gone and only its lease
// holds the key, so waiting would not bring an answer.
//
// An owner in this process wakes its waiters as its Do ends (the hand-off
// answers them within milliseconds rather than at the next poll); an owner
// on another replica is seen by reading the key about every pollInterval.
type Waits struct {
	clock func() time.Time
	mu    sync.Mutex
	m     map[Scope]*waiting
}

// waiting is the requests waiting on one key, and the signal of its owner's end.
type waiting struct {
	ended chan struct{}
	n     int
}

// NewWaits returns the layer of Prefer: wait on clock (nil: time.Now).
func NewWaits(clock func() time.Time) *Waits {
	if clock == nil {
		clock = time.Now
	}
	return &Waits{clock: clock, m: map[Scope]*waiting{}}
}

// Do runs do (the Runner's Do) for req, and while it answers 409 with the
// owner's work still under way, waits up to req.Wait and runs it again,
// reading the key first. Result.Waited says a replay came after a wait.
// Errors: do's; ctx's error when the client left during a wait.
func (w *Waits) Do(ctx context.Context, req Request, do func(context.Context, Request) (Result, error)) (Result, error) {
	start, wait := w.clock(), min(max(req.Wait, 0), maxWait)
	for waited := false; ; waited = true {
		res, err := do(ctx, req)
		left := min(wait-w.clock().Sub(start), res.WorkLeft)
		if res.Outcome != OutcomeInProgress || left <= 0 {
			if res.Outcome != OutcomeInProgress {
				w.ended(req.Scope) // this request wrote or read the key's end: who waits here looks again
			}
			res.Waited = waited && res.Replayed
			return res, err
		}
		if err := w.wait(ctx, req.Scope, left); err != nil {
			return res, fmt.Errorf("wait for the first attempt: the client left: %w", err)
		}
		req.Retry = true // the key is there: read it first
	}
}

// wait blocks until the owner of s here ends, a jittered pollInterval or d
// passes, or ctx ends (its error).
func (w *Waits) wait(ctx context.Context, s Scope, d time.Duration) error {
	w.mu.Lock()
	e := w.m[s]
	if e == nil {
		e = &waiting{ended: make(chan struct{})}
		w.m[s] = e
	}
	e.n++
	w.mu.Unlock()
	defer func() { // the last waiter drops the entry, unless the owner's end did
		w.mu.Lock()
		if e.n--; e.n == 0 && w.m[s] == e {
			delete(w.m, s)
		}
		w.mu.Unlock()
	}()
	t := time.NewTimer(min(d, pollInterval/2+rand.N(pollInterval)))
	defer t.Stop()
	select {
	case <-e.ended:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// ended wakes the requests waiting on s here: its owner answered, or let it go.
func (w *Waits) ended(s Scope) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[s]; e != nil {
		close(e.ended)
		delete(w.m, s)
	}
}
