package steps_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// TestStepsCheck: an operation of several steps declared half-way is
// refused by its name and its fault, not at its first request.
func TestStepsCheck(t *testing.T) {
	local := func(context.Context, *steps.Run, time.Time) (idempotency.Effect, error) { return nil, nil }
	call := func(context.Context, string, *steps.Run) (string, error) { return "", nil }
	status := func(context.Context, string) (string, error) { return "", nil }
	key := func(*steps.Run) string { return "k" }
	ext := &steps.External{Key: key, Call: call, Status: status}
	finish := func(context.Context, *steps.Run, time.Time) (idempotency.Answer, error) {
		return idempotency.Answer{}, nil
	}
	valid := func() steps.Steps {
		return steps.Steps{Operation: "op", MaxAttempts: 3, Limit: time.Minute, Finish: finish,
			Steps: []steps.Step{{Name: "a", Local: local}, {Name: "b", External: ext}}}
	}
	for _, c := range []struct {
		name   string
		change func(*steps.Steps)
		want   string // in the error; "" for none
	}{
		{"valid", func(*steps.Steps) {}, ""},
		{"no finish", func(s *steps.Steps) { s.Finish = nil }, "need an operation"},
		{"no limit", func(s *steps.Steps) { s.Limit = 0 }, "need an operation"},
		{"first external", func(s *steps.Steps) { s.Steps = s.Steps[1:] }, "first step must be local"},
		{"named twice", func(s *steps.Steps) { s.Steps[1].Name = "a" }, "named twice"},
		{"unnamed", func(s *steps.Steps) { s.Steps[1].Name = "" }, "unnamed"},
		{"both kinds", func(s *steps.Steps) { s.Steps[1].Local = local }, "local or external"},
		{"no status", func(s *steps.Steps) {
			s.Steps[1].External = &steps.External{Key: key, Call: call}
		}, "needs Key, Call and Status"},
		{"half an undo", func(s *steps.Steps) {
			s.Steps[1].External = &steps.External{Key: key, Call: call, Status: status, Undo: &steps.External{Key: key}}
		}, "the undo of b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := valid()
			c.change(&s)
			err := s.Check()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check: %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check: %v, want an error about %q", err, c.want)
			}
		})
	}
	s := valid()
	if !s.HasStep("b") || s.HasStep("c") {
		t.Fatal("HasStep does not know the steps")
	}
}
