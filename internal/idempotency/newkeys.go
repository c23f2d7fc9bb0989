package idempotency

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/demo-api/demo-api/internal/apperr"
)

// newKeys bounds each actor's new keys with a token bucket in this process: a scope's
// first request sets a token aside, others follow it, a new key's write spends it.
type newKeys struct {
	limit rate.Limit
	burst int
	clock func() time.Time // read under mu: a bucket handed a time before one it has seen refills that time twice

	mu     sync.Mutex
	actors map[string]*actorKeys
	swept  time.Time // when idle actors were last dropped
}

// actorKeys is one actor's bucket and what is in flight for it here.
type actorKeys struct {
	bucket   *rate.Limiter
	setAside int           // tokens set aside by leaders whose statement has not ended
	scopes   map[Scope]int // requests in flight, by scope
}

// sweepIdle is how often idle actors (as good as new ones) are dropped.
const sweepIdle = time.Minute

// pass is a request's admission to its path's statement; nil (no bound) does nothing.
type pass struct {
	k      *newKeys
	a      *actorKeys
	scope  Scope
	leader bool // it has a token set aside
}

// admit admits a request on s as a follower (s in flight, or follow), else as
// its leader with a token set aside; over the bound, nil and rate_limited.
func (k *newKeys) admit(s Scope, follow bool) (*pass, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock()
	k.dropIdle(now)
	a := k.actors[s.Actor]
	if a == nil {
		a = &actorKeys{bucket: rate.NewLimiter(k.limit, k.burst), scopes: map[Scope]int{}}
		k.actors[s.Actor] = a
	}
	leader := a.scopes[s] == 0 && !follow
	if free := a.bucket.TokensAt(now) - float64(a.setAside); leader && free < 1 {
		retryAfter := time.Duration(math.Ceil((1 - free) / float64(k.limit) * float64(time.Second)))
		return nil, &apperr.Error{Code: apperr.RateLimited, RetryAfter: max(retryAfter, time.Second),
			Message: "too many new idempotency keys from this actor; nothing was stored, send it again after Retry-After seconds"}
	}
	if leader {
		a.setAside++
	}
	a.scopes[s]++
	return &pass{k: k, a: a, scope: s, leader: leader}, nil
}

// claimed spends the token set aside, or a follower's from the bucket, into debt if need be.
func (p *pass) claimed() {
	if p == nil {
		return
	}
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if p.leader {
		p.a.setAside--
		p.leader = false
	}
	p.a.bucket.ReserveN(p.k.clock(), 1)
}

// done ends p: a token still set aside goes back, unspent.
func (p *pass) done() {
	if p == nil {
		return
	}
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if p.leader {
		p.a.setAside--
	}
	if p.a.scopes[p.scope]--; p.a.scopes[p.scope] <= 0 {
		delete(p.a.scopes, p.scope)
	}
}

// dropIdle drops, at most once per sweepIdle, the idle actors. k.mu is held.
func (k *newKeys) dropIdle(now time.Time) {
	if now.Sub(k.swept) < sweepIdle {
		return
	}
	k.swept = now
	for actor, a := range k.actors {
		if a.setAside == 0 && len(a.scopes) == 0 && a.bucket.TokensAt(now) >= float64(k.burst) {
			delete(k.actors, actor)
		}
	}
}
