// Package service holds the parts of demo-api's program that its main
// (cmd/demo-api) composes: the settings of each command, what serve and
// dispatch run on (App), and the commands that need nothing more.
package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/demo-api/demo-api/internal/auth"
)

// parseFlags parses a command's args into fs; -h prints usage and the flags
// to stdout and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage+"\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return err
}

// ExitCode is the exit status of a command that returned err: an
// ExitError's code, 1 for any other error, 0 for none.
func ExitCode(err error) int {
	if e, ok := errors.AsType[*ExitError](err); ok {
		return e.Code
	}
	if err != nil {
		return 1
	}
	return 0
}

const hashUsage = "usage: demo-api hash-token TOKEN\n\nPrints the hex SHA-256 of TOKEN, as API_TOKENS holds it (actor:sha256hex,…)."

// HashToken is demo-api hash-token: it prints the hash of the token in
// args, as API_TOKENS holds it.
func HashToken(args []string, stdout io.Writer) error {
	if len(args) == 1 && slices.Contains([]string{"-h", "-help", "--h", "--help"}, args[0]) {
		fmt.Fprintln(stdout, hashUsage)
		return nil
	}
	if len(args) != 1 {
		return errors.New("usage: demo-api hash-token TOKEN")
	}
	fmt.Fprintln(stdout, auth.Hash(args[0]))
	return nil
}
