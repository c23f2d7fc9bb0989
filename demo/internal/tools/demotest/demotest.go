// Package demotest starts the tests of the full demo: each test database
// gets the demo's schema after the template's, and the contract its
// routes.
package demotest

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/common"
	"go.yaml.in/yaml/v3"

	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// Main is pgtest.Main with the demo's schema in every test database, and
// the demo's routes in the contract the exchanges are checked against
// (testenv): call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main, returning the exit code.
func Run(m *testing.M) int {
	pgtest.Migrator = migrator{base: pgtest.Migrator}
	dir, err := os.MkdirTemp("", "demotest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	_, file, _, _ := runtime.Caller(0)
	merged, err := mergeContract(testenv.Contract, filepath.Join(filepath.Dir(file), "..", "..", "..", "api", "openapi.yaml"))
	if err == nil {
		testenv.Contract = filepath.Join(dir, "openapi.yaml")
		err = os.WriteFile(testenv.Contract, merged, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demotest:", err)
		return 1
	}
	return pgtest.Run(m)
}

// mergeContract is the OpenAPI document at base with the paths and
// components of the one at extra, which replace those of the same name.
func mergeContract(base, extra string) ([]byte, error) {
	var into, from map[string]any
	for path, doc := range map[string]*map[string]any{base: &into, extra: &from} {
		raw, err := os.ReadFile(path)
		if err == nil {
			err = yaml.Unmarshal(raw, doc)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	dig := func(m map[string]any, path []string) map[string]any {
		for _, name := range path {
			m, _ = m[name].(map[string]any)
		}
		return m
	}
	for _, at := range [][]string{{"paths"}, {"components", "schemas"}, {"components", "responses"}, {"components", "parameters"}, {"components", "headers"}} {
		if add, to := dig(from, at), dig(into, at); add != nil && to == nil {
			return nil, fmt.Errorf("%s has no %s to add to", base, strings.Join(at, "."))
		} else if add != nil {
			maps.Copy(to, add)
		}
	}
	return yaml.Marshal(into)
}

// migrator migrates a template as base does, then adds the demo's schema.
type migrator struct{ base pgtestdb.Migrator }

func (m migrator) Hash() (string, error) {
	a, err := m.base.Hash()
	if err != nil {
		return "", err
	}
	b, err := common.HashDirs(migrations.FS, "*.sql", ".")
	return a + "-" + b, err
}

func (m migrator) Migrate(ctx context.Context, db *sql.DB, conf pgtestdb.Config) error {
	if err := m.base.Migrate(ctx, db, conf); err != nil {
		return err
	}
	return postgres.MigrateFS(sqlx.NewDb(db, "postgres"), migrations.FS, ".", migrations.Table, 0)
}
