package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/peterldowns/pgtestdb"

	"github.com/demo-api/demo-api/internal/postgres"
)

// citusVersion is the citus extension's version at dsn, "" without one.
func citusVersion(ctx context.Context, dsn string) (string, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	err = db.QueryRowContext(ctx, `SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'citus'), '')`).Scan(&v)
	return v, err
}

// Citus reports whether the tests' server is a Citus coordinator.
func Citus() bool { return server != nil && server.Citus != "" }

// NewStore is the store for db, a database of NewDB: the store on Citus
// where the tests' server is a Citus coordinator.
func NewStore(db *sqlx.DB) *postgres.Store {
	if Citus() {
		return postgres.NewCitus(db)
	}
	return postgres.New(db)
}

// freshCitus is a new schema, migrated and distributed, of the Citus
// database for t: a clone would lack the workers' half of its tables.
func freshCitus(t testing.TB) pgtestdb.Config {
	t.Helper()
	schema := "test_" + strings.ToLower(rand.Text())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adminExec(ctx, "CREATE SCHEMA "+pq.QuoteIdentifier(schema)); err != nil {
		t.Fatalf("pgtest: Citus: %v", err)
	}
	conf := server.Config
	conf.Options = strings.TrimPrefix(conf.Options+"&search_path="+schema, "&")
	db, err := postgres.Open(ctx, conf.URL(), postgres.LongStatements)
	if err != nil {
		t.Fatalf("pgtest: Citus: %v", err)
	}
	defer db.Close()
	if err := postgres.Migrate(db, 0); err != nil {
		t.Fatalf("pgtest: Citus: schema %s: %v", schema, err)
	} else if _, err := postgres.Distribute(ctx, db); err != nil {
		t.Fatalf("pgtest: Citus: schema %s: %v", schema, err)
	}
	t.Logf("testdbconf: %s (a schema of the Citus database)", conf.URL())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: schema %s kept for a look", schema)
			return
		}
		if err := adminExec(context.Background(), "DROP SCHEMA "+pq.QuoteIdentifier(schema)+" CASCADE"); err != nil {
			t.Errorf("pgtest: Citus: %v", err)
		}
	})
	return conf
}

// adminExec runs query on the server Main started, as its admin.
func adminExec(ctx context.Context, query string) error {
	db, err := sqlx.Open("postgres", server.Config.URL())
	if err == nil {
		_, err = db.ExecContext(ctx, query)
		db.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	return nil
}
