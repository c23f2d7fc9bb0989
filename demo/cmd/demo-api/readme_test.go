package main

import (
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestReadmeWalkthrough runs the README's "Try every branch" blocks against
// demo-api serve set up as make run sets up a room (WORKSHOP_ROOM=true),
// for two participants at the same moment (ME=ana and ME=ben): every
// comment must come true for both.
func TestReadmeWalkthrough(t *testing.T) {
	testenv.Long(t, "a long end-to-end walk (the README's curl blocks, two participants)")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	base, _ := testenv.ServeInProcess(t, run, "API_TOKENS=alice:"+auth.Hash("dev-alice")+",bob:"+auth.Hash("dev-bob"),
		"WORKSHOP_ROOM=true", "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=4")
	testenv.Walkthrough(t, "../../README.md", []string{"API=" + base, "DESK=" + desk.URL}, "ana", "ben")
}
