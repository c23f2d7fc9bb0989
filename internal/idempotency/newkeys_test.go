package idempotency

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNewKeysHoldTheirBoundUnderARace: eight clients of one actor ask for
// new keys at once, on a clock that moves a millisecond at each read and
// where every other reader is held a millisecond after its read, as a
// goroutine preempted there would be. The keys taken stay within burst +
// rate × the time that passed: the bucket never counts a moment twice.
func TestNewKeysHoldTheirBoundUnderARace(t *testing.T) {
	var mu sync.Mutex
	start := time.Unix(0, 0)
	now, reads := start, 0
	clock := func() time.Time {
		mu.Lock()
		now = now.Add(time.Millisecond)
		at, held := now, reads%2 == 0
		reads++
		mu.Unlock()
		if held {
			time.Sleep(time.Millisecond)
		}
		return at
	}
	const perSecond, burst = 100, 5
	k := &NewKeys{limit: perSecond, burst: burst, clock: clock, actors: map[string]*actorKeys{}}
	var taken atomic.Int64
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := range 100 {
				p, _ := k.admit(Scope{Actor: "alice", Key: strconv.Itoa(c) + "-" + strconv.Itoa(i)}, false)
				if p != nil {
					p.claimed()
					taken.Add(1)
					p.done()
				}
			}
		})
	}
	wg.Wait()
	elapsed := now.Sub(start)
	most := burst + int(perSecond*elapsed.Seconds())
	if got := int(taken.Load()); got > most || got < burst {
		t.Fatalf("%d new keys in %v, want %d to %d", got, elapsed, burst, most)
	}
	t.Logf("%d new keys in %v (at most %d)", taken.Load(), elapsed, most)
}
