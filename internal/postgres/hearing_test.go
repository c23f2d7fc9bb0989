package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestAPoolsWaiters: statements waiting for a connection of a pool whose
// connections are all busy wait as long as the pool hears answers, and
// give up (unavailable, ErrSilent) once it has heard none for a second
// while a statement has run that long.
func TestAPoolsWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	sleep := func(d time.Duration) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, `SELECT pg_sleep($1)`, d.Seconds())
			return err
		}
	}
	run := func(n int, d time.Duration) ([]error, time.Duration) {
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			wg.Go(func() { errs[i] = postgres.Await(ctx, db, sleep(d)) })
		}
		wg.Wait()
		return errs, time.Since(start)
	}

	// Busy and answering: 16 statements of 0.3 s on 2 connections, the last
	// waiting more than two seconds for its turn.
	errs, took := run(16, 300*time.Millisecond)
	if err := errors.Join(errs...); err != nil || took < 2*time.Second {
		t.Fatalf("a busy pool that answers: %v after %v; want every statement run, the last after 2 s or more", err, took)
	}

	// Silent: both connections run a statement of 1.4 s (within its bound),
	// and nothing else answers; a third statement waits, then gives up.
	var wg sync.WaitGroup
	wg.Go(func() { errs, _ = run(2, 1400*time.Millisecond) })
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	err = postgres.Await(ctx, db, sleep(0))
	waited := time.Since(start)
	wg.Wait()
	if apperr.Code(err) != apperr.Unavailable || !errors.Is(err, postgres.ErrSilent) || waited > 1500*time.Millisecond {
		t.Fatalf("the waiter of a silent pool: %v after %v; want ErrSilent (unavailable) within 1.5 s", err, waited)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("the statements under way: %v; want them to end as they would", err)
	}
}
