package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/peterldowns/pgtestdb"
)

// spares are the databases passed tests left, emptied for the next test,
// far cheaper than a clone; one whose schema changed is dropped.
var spares struct {
	sync.Mutex
	list       []pgtestdb.Config
	readDigest sync.Once
	digest     string
	digestErr  error
}

// fresh is an empty, migrated database for t: a spare, else a new clone.
func fresh(t testing.TB) pgtestdb.Config {
	t.Helper()
	if Citus() {
		return freshCitus(t)
	}
	spares.Lock()
	n := len(spares.list)
	var conf pgtestdb.Config
	if n > 0 {
		conf, spares.list = spares.list[n-1], spares.list[:n-1]
	}
	spares.Unlock()
	if n > 0 {
		t.Logf("testdbconf: %s (emptied)", conf.URL()) // as pgtestdb logs a clone
	} else {
		conf = *pgtestdb.Custom(noDrop{t}, need(t).Config, Migrator)
		spares.readDigest.Do(func() { spares.digest, spares.digestErr = schemaDigest(context.Background(), conf) })
		if spares.digestErr != nil {
			t.Fatalf("pgtest: reading the schema of %s: %v", conf.Database, spares.digestErr)
		}
	}
	t.Cleanup(func() { release(t, conf) })
	return conf
}

// release makes conf a spare once t and its later cleanups have ended.
func release(t testing.TB, conf pgtestdb.Config) {
	if t.Failed() {
		t.Logf("pgtest: database %s kept for a look", conf.Database)
		return
	}
	err := empty(conf)
	if err == nil {
		spares.Lock()
		spares.list = append(spares.list, conf)
		spares.Unlock()
		return
	}
	t.Logf("pgtest: database %s not reused: %v", conf.Database, err)
	if err := dropDatabase(conf); err != nil {
		t.Errorf("pgtest: %v", err)
	}
}

// empty ends the database's other sessions, checks its schema, and
// truncates every table but the migrations'.
func empty(conf pgtestdb.Config) error {
	db, err := sqlx.Open("postgres", conf.URL())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		return err
	}
	if digest, err := schemaDigest(ctx, conf); err != nil || digest != spares.digest {
		return cmp.Or(err, errors.New("its schema changed"))
	}
	var tables []string
	if err := db.SelectContext(ctx, &tables, `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
		WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND tablename <> ALL ($1)`,
		pq.Array(MigrationTables)); err != nil || len(tables) == 0 {
		return err
	}
	_, err = db.ExecContext(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY")
	return err
}

// schemaDigest is a digest of the database's columns, indexes, constraints,
// functions and triggers.
func schemaDigest(ctx context.Context, conf pgtestdb.Config) (string, error) {
	db, err := sqlx.Open("postgres", conf.URL())
	if err != nil {
		return "", err
	}
	defer db.Close()
	var digest string
	err = db.GetContext(ctx, &digest, `
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))
SELECT md5(string_agg(d, E'\n' ORDER BY d)) FROM (
	SELECT format('%s %s %s %s', a.attrelid::regclass, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull)
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	WHERE c.relnamespace IN (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL SELECT pg_get_indexdef(i.indexrelid)
	FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace IN (SELECT oid FROM ns)
	UNION ALL SELECT format('%s %s', conrelid::regclass, pg_get_constraintdef(oid))
	FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ns)
	UNION ALL SELECT pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace IN (SELECT oid FROM ns) AND prokind IN ('f', 'p')
	UNION ALL SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
) AS s(d)`)
	return digest, err
}

// dropSpares drops the spares once the package's tests end.
func dropSpares() error {
	spares.Lock()
	defer spares.Unlock()
	for _, conf := range spares.list {
		if err := dropDatabase(conf); err != nil {
			return err
		}
	}
	spares.list = nil
	return nil
}

func dropDatabase(conf pgtestdb.Config) error {
	return adminExec(context.Background(), "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(conf.Database)+" WITH (FORCE)")
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

// noDrop keeps pgtestdb from dropping a clone: release decides.
type noDrop struct{ testing.TB }

func (noDrop) Cleanup(func()) {}
