package idempotency

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/demo-api/demo-api/internal/apperr"
)

// NewKeys is the admission in front of Runner.Do that bounds each actor's new
// keys: a token bucket per actor, in this process. The key is not a rate
// limit, but a client bug that makes a key per attempt must not fill the
// table, so a request that would store a new key over the bound gets 429
// rate_limited with Retry-After, and nothing is stored.
//
// Only a key that is stored new costs a token. A replay, a mismatch or a key
// held by another attempt is answered over the bound as under it; a storm of
// attempts at one key is one new key (its first request sets a token aside,
// the others follow it); a lease taken over is the same intent, no new key.
type NewKeys struct {
	limit   rate.Limit
	burst   int
	clock   func() time.Time // read under mu: a bucket handed a time before one it has seen refills that time twice
	lookup  func(ctx context.Context, s Scope) (*Record, time.Time, error)
	observe func(operation string, p Path, o Outcome)

	mu     sync.Mutex
	actors map[string]*actorKeys
	swept  time.Time // when idle actors were last dropped
}

// BoundNewKeys returns the admission of at most perSecond new keys per actor,
// burst at once, that reads keys from keys (a Store) and reports its
// refusals to observe (which may be nil).
func BoundNewKeys(perSecond float64, burst int, keys interface {
	Lookup(ctx context.Context, s Scope) (*Record, time.Time, error)
}, observe func(operation string, p Path, o Outcome)) (*NewKeys, error) {
	if perSecond <= 0 || burst < 1 || keys == nil {
		return nil, errors.New("idempotency: a bound on new keys needs a positive rate, a burst of at least 1 and a Store")
	}
	return &NewKeys{limit: rate.Limit(perSecond), burst: burst, clock: time.Now, lookup: keys.Lookup,
		observe: observe, actors: map[string]*actorKeys{}}, nil
}

// OutcomeRateLimited: refused under the bound on new keys; nothing was stored.
const OutcomeRateLimited Outcome = "rate_limited"

// lookupTimeout bounds the read of a refused request's key: a refusal never
// waits behind a busy pool.
const lookupTimeout = 250 * time.Millisecond

// Admit runs do, the Runner's Do for req, unless req would store a new key
// over the bound: then it answers 429 rate_limited. A nil NewKeys admits all.
func (k *NewKeys) Admit(ctx context.Context, req Request, do func(context.Context) (Result, error)) (Result, error) {
	if k == nil {
		return do(ctx)
	}
	p, refused := k.admit(req.Scope, false)
	if refused != nil {
		if !k.stored(ctx, req) {
			if k.observe != nil {
				k.observe(req.Scope.Operation, req.Path, OutcomeRateLimited)
			}
			return Result{Path: req.Path, Outcome: OutcomeRateLimited}, refused
		}
		p, _ = k.admit(req.Scope, true) // a stored key is no new key: it follows
	}
	defer p.done()
	res, err := do(ctx)
	if o := res.Outcome; o == OutcomeCompleted || o == OutcomeClaimed || o == OutcomeExpiredTakenOver {
		p.claimed()
	}
	return res, err
}

// stored reports whether req's key is stored and not free to write as a new
// key (Decide answers it without a new write: a replay, a mismatch, held, a
// lease to take over). A read that fails in time counts as not stored.
func (k *NewKeys) stored(ctx context.Context, req Request) bool {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	rec, now, err := k.lookup(ctx, req.Scope)
	if err != nil {
		return false
	}
	kind := Decide(rec, req.Fingerprint, now).Kind
	return kind != ClaimNew && kind != TakeOverExpired
}

// actorKeys is one actor's bucket and what is in flight for it here.
type actorKeys struct {
	bucket   *rate.Limiter
	setAside int           // tokens set aside by leaders whose request has not ended
	scopes   map[Scope]int // requests in flight, by scope
}

// sweepIdle is how often idle actors (as good as new ones) are dropped.
const sweepIdle = time.Minute

// pass is a request's admission; nil (no bound) does nothing.
type pass struct {
	k      *NewKeys
	a      *actorKeys
	scope  Scope
	leader bool // it has a token set aside
}

// admit admits a request on s as a follower (s in flight, or follow), else
// as its leader with a token set aside; over the bound, nil and rate_limited.
// A leader sets its token aside before its statement, so that requests of
// other keys racing it cannot spend the same token.
func (k *NewKeys) admit(s Scope, follow bool) (*pass, error) {
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

// claimed spends the token set aside, or a follower's from the bucket, into
// debt if need be: a follower that stored a new key (its key expired meanwhile) still pays.
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
func (k *NewKeys) dropIdle(now time.Time) {
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
