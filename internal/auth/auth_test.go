package auth

import "testing"

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
