package runs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

// newStore is a store of runs on a fresh database, on a clock of the
// test's own.
func newStore(t *testing.T) (*runs.Store, *sqlx.DB, *testenv.Clock) {
	t.Parallel()
	db, err := postgres.Open(context.Background(), pgtest.NewURL(t), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := postgres.New(db)
	c := testenv.NewClock()
	keys.Clock = c.Now
	return runs.New(keys), db, c
}

func count(t *testing.T, db *sqlx.DB, query string, args ...any) int {
	t.Helper()
	return testenv.Count(t, db, query, args...)
}
