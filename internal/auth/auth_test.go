package auth

import (
	"strings"
	"testing"
)

func TestParseAndActor(t *testing.T) {
	tokens, err := Parse("alice:" + Hash("tok-a") + ", bob:" + Hash("tok-b"))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"tok-a": "alice", "tok-b": "bob"} {
		if got, ok := tokens.Actor(token); !ok || got != want {
			t.Errorf("Actor(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
	for _, token := range []string{"", "tok-c", Hash("tok-a")} {
		if got, ok := tokens.Actor(token); ok {
			t.Errorf("Actor(%q) = %q, want unknown", token, got)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, spec := range []string{"", "alice", "alice:tok-a", ":" + Hash("x"), "alice:" + Hash("x")[:10]} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) succeeded", spec)
		}
	}
}

func TestRoomActor(t *testing.T) {
	for token, want := range map[string]string{"dev-alice": "dev-alice", "dev-ana.m": "dev-ana.m", "dev-bo_b-2": "dev-bo_b-2", "dev-7": "dev-7",
		"dev-" + strings.Repeat("a", 32): "dev-" + strings.Repeat("a", 32)} {
		if got, ok := RoomActor(token); !ok || got != want {
			t.Errorf("RoomActor(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
	for _, token := range []string{"", "dev-", "alice", "Dev-alice", "dev-Alice", "dev-al ice", "dev--x", "dev-.x", "dev-a/b",
		"dev-" + strings.Repeat("a", 33), "dev-é", "xdev-alice", "dev-alice\n"} {
		if got, ok := RoomActor(token); ok {
			t.Errorf("RoomActor(%q) = %q, want refused", token, got)
		}
	}
}

// TestCheckRoom: a configured actor whose name a participant could have is
// refused in a room; other names pass.
func TestCheckRoom(t *testing.T) {
	ok, err := Parse("alice:" + Hash("a") + ",u1:" + Hash("b") + ",devops:" + Hash("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRoom(ok); err != nil {
		t.Fatalf("CheckRoom(alice, u1, devops) = %v, want nil", err)
	}
	clash, err := Parse("alice:" + Hash("a") + ",dev-ana:" + Hash("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRoom(clash); err == nil || !strings.Contains(err.Error(), `"dev-ana"`) {
		t.Fatalf("CheckRoom(alice, dev-ana) = %v, want an error naming dev-ana", err)
	}
}
