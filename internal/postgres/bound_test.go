package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestStatementBound: a statement that runs past its pool's bound ends
// there, on the server too (it is cancelled, SQLSTATE 57014, which the
// store answers as unavailable), directly and through a PgBouncer in
// transaction mode that refuses a statement_timeout startup parameter;
// alone, prepared, and inside a transaction.
func TestStatementBound(t *testing.T) {
	testenv.Long(t, "runs behind PgBouncer")
	t.Parallel()
	bouncer := pgtest.NewPgBouncer(t, "")
	const bound = 300 * time.Millisecond
	for _, via := range []string{"direct", "pgbouncer"} {
		t.Run(via, func(t *testing.T) {
			url := pgtest.NewURL(t)
			if via == "pgbouncer" {
				url = bouncer.URL(url)
			}
			db, err := postgres.Open(context.Background(), url, bound)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got, want := postgres.Pooled(db), via == "pgbouncer"; got != want {
				t.Fatalf("Pooled = %v through %s, want %v", got, via, want)
			}
			ctx := context.Background()
			var dbName string
			if err := db.GetContext(ctx, &dbName, `SELECT current_database()`); err != nil {
				t.Fatal(err)
			}
			for _, run := range []struct {
				name string
				fn   func() error
			}{
				{"alone", func() error { _, err := db.ExecContext(ctx, "SELECT pg_sleep(5)"); return err }},
				{"with rows", func() error {
					var n int
					return db.GetContext(ctx, &n, "SELECT 1 FROM pg_sleep($1)", 5)
				}},
				{"prepared", func() error {
					st, err := db.PreparexContext(ctx, "SELECT pg_sleep($1)")
					if err != nil {
						return err
					}
					defer st.Close()
					_, err = st.ExecContext(ctx, 5)
					return err
				}},
				{"in a transaction", func() error {
					tx, err := db.BeginTxx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
						return err
					}
					_, err = tx.ExecContext(ctx, "SELECT pg_sleep(5)")
					return err
				}},
			} {
				start := time.Now()
				err := run.fn()
				took := time.Since(start)
				if err == nil || took > bound+time.Second {
					t.Fatalf("%s: a 5 s statement with a bound of %v: %v after %v", run.name, bound, err, took)
				}
				if _, ok := errors.AsType[*pq.Error](err); ok {
					if e, _ := errors.AsType[*pq.Error](err); e.Code != "57014" {
						t.Fatalf("%s: %v, want 57014 (cancelled)", run.name, err)
					}
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s: %v, want the statement cancelled", run.name, err)
				}
				if e, ok := errors.AsType[*apperr.Error](postgres.DBErr(err)); !ok || e.Code != apperr.Unavailable {
					t.Fatalf("%s: %v is not answered as unavailable", run.name, err)
				}
			}
			// Nothing of them goes on on the server (in their database: the
			// tests beside this one sleep too).
			direct := pgtest.NewDB(t)
			if !testenv.Eventually(2*time.Second, func() bool {
				return testenv.Count(t, direct, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep%' AND state = 'active'
					AND datname = $1`, dbName) == 0
			}) {
				t.Fatal("a bounded statement still runs on the server")
			}
			var one int
			if err := db.GetContext(ctx, &one, "SELECT 1"); err != nil || one != 1 {
				t.Fatalf("the pool after the cancels: %d, %v", one, err)
			}
		})
	}
}
