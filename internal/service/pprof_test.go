package service

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/auth"
)

// TestServeRefusesAProfilerBeyondThisMachine: serve with PPROF_ADDR on
// every interface stops before it opens anything.
func TestServeRefusesAProfilerBeyondThisMachine(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL": "postgres://nowhere.invalid/x", // never reached
		"API_TOKENS":   "alice:" + auth.Hash("t"),
		"PPROF_ADDR":   "0.0.0.0:0",
	}
	err := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "this machine only") {
		t.Fatalf("serve with PPROF_ADDR=0.0.0.0:0: %v", err)
	}
}
