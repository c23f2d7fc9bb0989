// Package demotest starts the tests of the full demo: each test database
// gets the demo's schema after the template's, and the contract its
// routes.
package demotest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// Main is pgtest.Main with the demo's schema in every test database, and
// the demo's routes in the contract the exchanges are checked against
// (testenv): call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main, returning the exit code.
func Run(m *testing.M) int {
	pgtest.Extra(migrations.FS, ".", migrations.Table)
	_, file, _, _ := runtime.Caller(0)
	testenv.Extend(filepath.Join(filepath.Dir(file), "..", "..", "..", "api", "openapi.yaml"))
	return pgtest.Run(m)
}
