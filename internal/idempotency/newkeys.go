package idempotency

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/demo-api/demo-api/internal/apperr"
)

// OutcomeRateLimited counts a request refused because its actor is over
// the bound on new keys (Config.NewKeysPerSecond): nothing was stored.
const OutcomeRateLimited Outcome = "rate_limited"

// newKeys bounds the new keys of each actor with a token bucket per actor in
// this process. A token pays for a key written where none was stored or one
// had expired, never for a replay, a retry in progress or a mismatch: only
// the statement that wrote a new key takes it (pass.claimed).
//
// Before that statement, the first request of a scope in this process (its
// leader) sets aside a token no other leader holds, until its statement
// ends; a request whose scope has one in flight follows it without a token,
// since the unique index lets only one of them write. So a storm of one key
// costs one token. A request refused a token asks the store (Runner.admit)
// before it is answered 429.
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

// sweepIdle is how often actors with a full bucket and nothing in flight are
// dropped: such an actor is as a new one, so only memory changes.
const sweepIdle = time.Minute

func newNewKeys(perSecond float64, burst int, clock func() time.Time) *newKeys {
	if perSecond <= 0 {
		return nil
	}
	return &newKeys{limit: rate.Limit(perSecond), burst: burst, clock: clock, actors: map[string]*actorKeys{}}
}

// pass is a request's admission to its path's statement. A nil pass (no
// bound) does nothing.
type pass struct {
	k      *newKeys
	a      *actorKeys
	scope  Scope
	leader bool // it has a token set aside
	took   bool // its statement wrote a new key, and took the token
}

// admit admits a request of scope s: as the leader of its scope, with a
// token set aside, or as a follower of the request in flight. It returns
// nil and how long until a token is free when the actor is over the bound.
func (k *newKeys) admit(s Scope) (*pass, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock()
	k.dropIdle(now)
	a := k.actor(s.Actor)
	if a.scopes[s] > 0 {
		a.scopes[s]++
		return &pass{k: k, a: a, scope: s}, 0
	}
	free := a.bucket.TokensAt(now) - float64(a.setAside)
	if free < 1 {
		return nil, time.Duration(math.Ceil((1 - free) / float64(k.limit) * float64(time.Second)))
	}
	a.setAside++
	a.scopes[s]++
	return &pass{k: k, a: a, scope: s, leader: true}, 0
}

// actor is actor's bucket, new if need be. k.mu is held.
func (k *newKeys) actor(actor string) *actorKeys {
	a := k.actors[actor]
	if a == nil {
		a = &actorKeys{bucket: rate.NewLimiter(k.limit, k.burst), scopes: map[Scope]int{}}
		k.actors[actor] = a
	}
	return a
}

// follow admits a request of scope s without a token: the store holds its
// key, so its statement writes no new one.
func (k *newKeys) follow(s Scope) *pass {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.actor(s.Actor)
	a.scopes[s]++
	return &pass{k: k, a: a, scope: s}
}

// claimed takes the token of the new key p's statement wrote: the
// leader's, set aside; a follower's (its leader failed before writing) is
// taken from the bucket as it stands, into debt if need be.
func (p *pass) claimed() {
	if p == nil || p.took {
		return
	}
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	now := p.k.clock()
	if p.leader {
		p.a.setAside--
		p.leader = false
	}
	p.a.bucket.ReserveN(now, 1)
	p.took = true
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

// dropIdle drops, at most once per sweepIdle, the actors with a full
// bucket and nothing in flight. k.mu is held.
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

func rateLimited(retryAfter time.Duration) error {
	return &apperr.Error{
		Code:       apperr.RateLimited,
		Message:    "too many new idempotency keys from this actor; nothing was stored, send it again after Retry-After seconds",
		RetryAfter: max(retryAfter, time.Second),
	}
}
