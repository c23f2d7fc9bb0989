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

// begin notes an exchange on ctx starting, and returns its end; meanwhile the statement
// whose watch ctx carries, if any, is not waiting.
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

// watch returns ctx as a statement on db's pool runs on it: it ends, ErrSilent, once
// the pool is silent while the statement waits for a connection. While the statement
// runs, its own bound applies instead: a running statement is not cut short because the
// pool is quiet, only a wait for a turn is. Its end stops the watch and returns the
// statement's error, as 503 where the watch ended it.
func watch(ctx context.Context, db *sqlx.DB) (context.Context, func(error) error) {
	c, ok := db.Driver().(*boundConnector)
	if !ok {
		return ctx, func(err error) error { return err }
	}
	running := new(atomic.Bool) // while the statement is under way (hearing.begin)
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, waiterKey{}, running))
	var check func() // after silence, then every silence/4 until the end
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
	return ctx, func(err error) error {
		timer.Stop()
		silenced := errors.Is(context.Cause(ctx), ErrSilent)
		cancel(nil)
		if err != nil && silenced {
			return dbErr(ErrSilent)
		}
		return err
	}
}

// Watched is s's keys as a Runner is handed them, behind the pool's watch:
// a key's statement that waits for a connection of a pool whose database
// hears nothing gives up with 503 (watch) rather than queue behind it, so
// that an outage answers at once and a client retries with its key. The
// watch is the pool's policy around the statements, which are plain
// database/sql.
func (s *Store) Watched() idempotency.Store { return watched{s} }

// watched is a Store whose key statements run under the watch.
type watched struct{ s *Store }

func (w watched) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (idempotency.KeyWrite, error) {
	ctx, end := watch(ctx, w.s.db)
	kw, err := w.s.Claim(ctx, c, fp, lease, ttl)
	return kw, end(err)
}

func (w watched) CompleteAtomically(ctx context.Context, c idempotency.Claim, fp string, ttl time.Duration, a idempotency.Answer) (idempotency.KeyWrite, error) {
	ctx, end := watch(ctx, w.s.db)
	kw, err := w.s.CompleteAtomically(ctx, c, fp, ttl, a)
	return kw, end(err)
}

func (w watched) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	ctx, end := watch(ctx, w.s.db)
	return end(w.s.FinishClaimAtomically(ctx, c, a))
}

func (w watched) Release(ctx context.Context, c idempotency.Claim) error {
	ctx, end := watch(ctx, w.s.db)
	return end(w.s.Release(ctx, c))
}

func (w watched) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	ctx, end := watch(ctx, w.s.db)
	rec, now, err := w.s.Lookup(ctx, sc)
	return rec, now, end(err)
}
