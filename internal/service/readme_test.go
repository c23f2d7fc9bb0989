package service

import (
	"testing"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestReadmeWalkthrough runs the README's "Try every branch" blocks against
// serve set up as make run sets it up, for two people at the same moment
// (ME=ana and ME=ben, keys of their own): every comment must come true for
// both.
func TestReadmeWalkthrough(t *testing.T) {
	testenv.Long(t, "an end-to-end walk (the README's curl blocks)")
	t.Parallel()
	base, _ := testenv.ServeInProcess(t, run, "API_TOKENS=alice:"+auth.Hash("dev-alice")+",bob:"+auth.Hash("dev-bob"))
	testenv.Walkthrough(t, "../../README.md", []string{"API=" + base}, "ana", "ben")
}
