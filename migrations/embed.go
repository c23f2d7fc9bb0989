// Package migrations holds the schema as golang-migrate files, embedded so the
// binary and the tests apply exactly the same SQL.
package migrations

import "embed"

// FS holds every *.sql migration of this folder.
//
//go:embed *.sql
var FS embed.FS

// Citus holds citus/distribute.sql, which migrate runs once on a Citus
// coordinator after the migrations, and citus/key_writes.sql and
// citus/scans.sql, which it runs there on every migrate
// (postgres.Distribute).
//
//go:embed citus/*.sql
var Citus embed.FS
