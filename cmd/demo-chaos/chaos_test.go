package main

import (
	"context"
	"strings"
	"testing"
)

// TestShortCampaign runs the short campaign (two scenarios: a replica
// SIGKILLed and restarted, the database link cut for 3 s) against the real
// binaries, so that make test keeps the harness working; every check of the
// campaign must pass.
func TestShortCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the desk and two replicas")
	}
	var progress strings.Builder
	rep, err := run(context.Background(), options{short: true, intents: 400, workers: 8}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.results) != 2 {
		t.Fatalf("%d scenarios ran, want 2", len(rep.results))
	}
	for _, res := range rep.results {
		if res.created == 0 || res.replaysChecked != res.intents {
			t.Errorf("%s: %d intents, %d created, %d replays checked: the load or the checks did not run",
				res.scenario.name, res.intents, res.created, res.replaysChecked)
		}
	}
	if rep.failed() {
		t.Fatalf("checks failed:\n%s\n%s", strings.Join(rep.failures(), "\n"), rep.markdown())
	}
	t.Logf("\n%s", rep.markdown())
}
