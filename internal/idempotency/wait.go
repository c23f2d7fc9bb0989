package idempotency

import (
	"context"
	"sync"
	"time"
)

// pollInterval is how often a waiting request asks the store again when no
// finish in this process wakes it (the owner runs on another replica).
const pollInterval = 250 * time.Millisecond

// waiters wakes the requests of this process that wait for a key's answer
// (Prefer: wait) as soon as the owner's work ends here. A waiter holds no
// database connection and no lock while it waits.
type waiters struct {
	mu sync.Mutex
	ch map[Scope]chan struct{}
}

// wait blocks until the owner of s in this process ends its work, the next
// poll is due, or until passes; it returns false once until has passed or ctx
// ended, when the caller should stop waiting.
func (w *waiters) wait(ctx context.Context, s Scope, until time.Time) bool {
	w.mu.Lock()
	if w.ch == nil {
		w.ch = map[Scope]chan struct{}{}
	}
	ch, ok := w.ch[s]
	if !ok {
		ch = make(chan struct{})
		w.ch[s] = ch
	}
	w.mu.Unlock()

	t := time.NewTimer(min(time.Until(until), pollInterval))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	// Not woken: the owner may run elsewhere. Forget the channel so the map
	// does not grow with keys finished on other replicas; a request still
	// waiting on it falls back to its poll.
	w.mu.Lock()
	if w.ch[s] == ch {
		delete(w.ch, s)
	}
	w.mu.Unlock()
	return ctx.Err() == nil && time.Now().Before(until)
}

// wake releases every request waiting on s.
func (w *waiters) wake(s Scope) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.ch[s]; ok {
		close(ch)
		delete(w.ch, s)
	}
}
