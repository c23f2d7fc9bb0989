package room

import (
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/auth"
)

func TestActor(t *testing.T) {
	for token, want := range map[string]string{"dev-alice": "dev-alice", "dev-ana.m": "dev-ana.m", "dev-bo_b-2": "dev-bo_b-2", "dev-7": "dev-7",
		"dev-" + strings.Repeat("a", 32): "dev-" + strings.Repeat("a", 32)} {
		if got, ok := Actor(token); !ok || got != want {
			t.Errorf("Actor(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
	for _, token := range []string{"", "dev-", "alice", "Dev-alice", "dev-Alice", "dev-al ice", "dev--x", "dev-.x", "dev-a/b",
		"dev-" + strings.Repeat("a", 33), "dev-é", "xdev-alice", "dev-alice\n"} {
		if got, ok := Actor(token); ok {
			t.Errorf("Actor(%q) = %q, want refused", token, got)
		}
	}
}

// TestCheckRoom: a configured actor whose name a participant could have is
// refused in a room; other names pass.
func TestCheck(t *testing.T) {
	ok, err := auth.Parse("alice:" + auth.Hash("a") + ",u1:" + auth.Hash("b") + ",devops:" + auth.Hash("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(ok); err != nil {
		t.Fatalf("Check(alice, u1, devops) = %v, want nil", err)
	}
	clash, err := auth.Parse("alice:" + auth.Hash("a") + ",dev-ana:" + auth.Hash("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(clash); err == nil || !strings.Contains(err.Error(), `"dev-ana"`) {
		t.Fatalf("Check(alice, dev-ana) = %v, want an error naming dev-ana", err)
	}
}
