package service

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/demo-api/demo-api/internal/postgres"
)

const sqlUsage = `usage: demo-api sql [NAME]

Prints the statements composed at start-up from internal/postgres/sql/key/
(the key row's part, written once) and sql/effect/ (an operation's own
business write), as PostgreSQL runs them; with NAME (as
cancel_demo_request.sql) only that one.`

// sqlCmd prints the composed statements, or the one named.
func sqlCmd(args []string, stdout io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprintln(stdout, sqlUsage)
		return nil
	}
	stmts := postgres.Statements()
	names := make([]string, 0, len(stmts))
	for name := range stmts {
		names = append(names, name)
	}
	slices.Sort(names)
	switch len(args) {
	case 0:
	case 1:
		if _, ok := stmts[args[0]]; !ok {
			return fmt.Errorf("no composed statement %q (there are %v)", args[0], names)
		}
		names = args[:1]
	default:
		return errors.New(sqlUsage)
	}
	for i, name := range names {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprint(stdout, stmts[name])
	}
	return nil
}
