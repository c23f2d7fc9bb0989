// Package migrations holds the full demo's own schema, applied after the
// template's with a migrations table of its own (demo_schema_migrations):
// the runs of operations of several steps and the expedites.
package migrations

import (
	"embed"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
)

// FS holds every *.sql migration of this folder.
//
//go:embed *.sql
var FS embed.FS

// Table is the demo's migrations table.
const Table = "demo_schema_migrations"

// Migrate brings db's schema up to date: the template's, then the demo's.
func Migrate(db *sqlx.DB) error {
	if err := postgres.Migrate(db, 0); err != nil {
		return err
	}
	return postgres.MigrateFS(db, FS, ".", Table, 0)
}
