package service

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestSQLPrintsTheComposedStatements: demo-api sql prints each statement
// composed of a key shape and an effect, with its parameters numbered
// after the key's; a name prints that one alone, an unknown name fails.
func TestSQLPrintsTheComposedStatements(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"sql"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-- cancel_demo_request.sql: sql/key/free.sql", "-- cancel_demo_request_takeover.sql: ",
		"-- finish_claim_cancel_demo_request.sql: ", "UPDATE demo_requests SET state = $12, cancelled_at = $13::timestamptz",
		"UPDATE demo_requests SET state = $10, cancelled_at = $11::timestamptz"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo-api sql lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "@effect") || strings.Contains(out.String(), ":actor_id") {
		t.Error("demo-api sql printed a placeholder")
	}
	out.Reset()
	if err := run(context.Background(), []string{"sql", "finish_claim_cancel_demo_request.sql"}, func(string) string { return "" }, &out, io.Discard); err != nil ||
		strings.Count(out.String(), "\nWITH clock") != 1 {
		t.Fatalf("demo-api sql NAME: %v\n%s", err, out.String())
	}
	if err := run(context.Background(), []string{"sql", "nope.sql"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Fatal("demo-api sql nope.sql succeeded")
	}
}
