package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/peterldowns/pgtestdb"

	"github.com/demo-api/demo-api/internal/postgres"
)

// On a Citus coordinator (TEST_DATABASE_URL, e.g. scripts/citus.sh's), a
// database cloned from a template would have the coordinator's half of
// its distributed tables and none of the workers': each test gets a schema
// of its own in the one database instead, migrated and distributed
// (postgres.Distribute) as migrate does it, and reached through the URL's
// search_path. A test that passed drops its schema; one that failed keeps
// it for a look.

// citusVersion returns the version of the citus extension of the database
// at dsn, or "" when it has none.
func citusVersion(ctx context.Context, dsn string) (string, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	err = db.QueryRowContext(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// Citus reports whether the tests' server is a Citus coordinator, for the
// tests that need to know (a worker stopped under load).
func Citus() bool { return server != nil && server.Citus != "" }

// freshCitus returns the config of a new schema of the Citus database,
// migrated and distributed, for t.
func freshCitus(t testing.TB) pgtestdb.Config {
	t.Helper()
	admin, err := sqlx.Open("postgres", server.Config.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "test_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+pq.QuoteIdentifier(schema)); err != nil {
		t.Fatalf("pgtest: Citus: %v", err)
	}
	conf := server.Config
	if conf.Options != "" {
		conf.Options += "&"
	}
	conf.Options += "search_path=" + schema
	db, err := postgres.Open(ctx, conf.URL(), postgres.LongStatements)
	if err != nil {
		t.Fatalf("pgtest: Citus: %v", err)
	}
	defer db.Close()
	if err := postgres.Migrate(db, 0); err != nil {
		t.Fatalf("pgtest: Citus: schema %s: %v", schema, err)
	}
	if _, err := postgres.Distribute(ctx, db); err != nil {
		t.Fatalf("pgtest: Citus: schema %s: %v", schema, err)
	}
	t.Logf("testdbconf: %s (a schema of the Citus database)", conf.URL())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: schema %s kept for a look", schema)
			return
		}
		admin, err := sqlx.Open("postgres", server.Config.URL())
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close()
		if _, err := admin.Exec("DROP SCHEMA " + pq.QuoteIdentifier(schema) + " CASCADE"); err != nil {
			t.Errorf("pgtest: Citus: dropping schema %s: %v", schema, fmt.Sprint(err))
		}
	})
	return conf
}
