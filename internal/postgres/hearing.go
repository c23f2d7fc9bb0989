package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// database/sql bounds a wait for a connection by the caller's context only: with the database
// gone, a waiter would outwait every statement ahead, so it gives up once its pool is silent.

// silence is how long a pool hears nothing before its waiters give up. It is shorter
// than a statement's bound: a waiter that outwaited the statements ahead of it would
// answer only after all of them, one bound each, at ten times the pool.
const silence = time.Second

// ErrSilent is the error of a statement that gave up waiting for a connection of a silent pool.
var ErrSilent = errors.New("postgres: the database has not answered for a while; no connection was free")

// hearing is what a pool has heard of its database: when it last answered, and which
// exchanges (connects and statements) are under way. A refusal from the server counts
// as an answer: the database is there, only the statement failed.
type hearing struct {
	mu       sync.Mutex
	answered time.Time               // the last answer: a result, or the server's error
	underway map[*time.Time]struct{} // the exchanges under way, by their start
}

// begin notes an exchange on ctx starting, and returns its end; meanwhile the waiter of
// await that ctx carries, if any, is not waiting.
func (h *hearing) begin(ctx context.Context) func(error) {
	w, _ := ctx.Value(waiterKey{}).(*atomic.Bool)
	if w != nil {
		w.Store(true)
	}
	start := time.Now()
	h.mu.Lock()
	h.underway[&start] = struct{}{}
	h.mu.Unlock()
	return func(err error) {
		if w != nil {
			w.Store(false)
		}
		_, refused := errors.AsType[*pq.Error](err)
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.underway, &start)
		if err == nil || refused {
			h.answered = time.Now()
		}
	}
}

// silent reports whether nothing answered for silence while an exchange was under way that long.
func (h *hearing) silent() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	since := time.Now().Add(-silence)
	if h.answered.After(since) {
		return false
	}
	for start := range h.underway {
		if start.Before(since) {
			return true
		}
	}
	return false
}

type waiterKey struct{}

// await runs fn on a context that ends, ErrSilent, once db's pool is silent while fn waits for a connection.
// While one of fn's statements runs, its own bound applies instead: a running
// statement is not cut short because the pool is quiet, only a wait for a turn is.
func await(ctx context.Context, db *sqlx.DB, fn func(context.Context) error) error {
	c, ok := db.Driver().(*boundConnector)
	if !ok {
		return fn(ctx)
	}
	running := new(atomic.Bool) // while a statement of fn is under way (hearing.begin)
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, waiterKey{}, running))
	defer cancel(nil)
	var check func() // after silence, then every silence/4 until fn ends
	check = func() {
		switch {
		case ctx.Err() != nil:
		case !running.Load() && c.hear.silent():
			cancel(ErrSilent)
		default:
			time.AfterFunc(silence/4, check)
		}
	}
	timer := time.AfterFunc(silence, check)
	defer timer.Stop()
	err := fn(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrSilent) {
		return dbErr(ErrSilent)
	}
	return err
}

// Watched is s's keys as a Runner is handed them, behind the pool's watch:
// a key's statement that waits for a connection of a pool whose database
// hears nothing gives up with 503 (await) rather than queue behind it, so
// that an outage answers at once and a client retries with its key. The
// watch is the pool's policy around the statements, which are plain
// database/sql.
func (s *Store) Watched() idempotency.Store { return watched{s} }

// watched is a Store whose key statements are awaited.
type watched struct{ s *Store }

func (w watched) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (kw idempotency.KeyWrite, err error) {
	err = await(ctx, w.s.db, func(ctx context.Context) error { kw, err = w.s.Claim(ctx, c, fp, lease, ttl); return err })
	return kw, err
}

func (w watched) CompleteAtomically(ctx context.Context, c idempotency.Claim, fp string, ttl time.Duration, a idempotency.Answer) (kw idempotency.KeyWrite, err error) {
	err = await(ctx, w.s.db, func(ctx context.Context) error { kw, err = w.s.CompleteAtomically(ctx, c, fp, ttl, a); return err })
	return kw, err
}

func (w watched) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	return await(ctx, w.s.db, func(ctx context.Context) error { return w.s.FinishClaimAtomically(ctx, c, a) })
}

func (w watched) Release(ctx context.Context, c idempotency.Claim) error {
	return await(ctx, w.s.db, func(ctx context.Context) error { return w.s.Release(ctx, c) })
}

func (w watched) Lookup(ctx context.Context, sc idempotency.Scope) (rec *idempotency.Record, now time.Time, err error) {
	err = await(ctx, w.s.db, func(ctx context.Context) error { rec, now, err = w.s.Lookup(ctx, sc); return err })
	return rec, now, err
}
