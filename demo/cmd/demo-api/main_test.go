package main

import (
	"os"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/browsertest"
	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m, ".", demotest.Run)
	if err := browsertest.Close(); err != nil {
		code = max(code, 1)
	}
	os.Exit(code)
}
