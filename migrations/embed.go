// Package migrations embeds the schema's golang-migrate files, so the binary
// and the tests apply the same SQL.
package migrations

import "embed"

// FS holds the migrations.
//
//go:embed *.sql
var FS embed.FS

// Citus holds what migrate runs on a Citus coordinator (postgres.Distribute).
//
//go:embed citus/*.sql
var Citus embed.FS
