package main

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/browsertest"
	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
	"github.com/demo-api/demo-api/internal/service"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m, ".", demotest.Run)
	if err := browsertest.Close(); err != nil {
		code = max(code, 1)
	}
	os.Exit(code)
}

// run is the full demo's program, run in this process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return service.Main(ctx, args, getenv, stdout, stderr, extension())
}
