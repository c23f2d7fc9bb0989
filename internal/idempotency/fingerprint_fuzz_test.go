package idempotency

import (
	"testing"
	"unicode/utf8"
)

// FuzzFingerprint: the order in which fields are given never changes the
// fingerprint, two different intents never share one, and what JSON cannot
// encode faithfully (invalid UTF-8) is refused.
func FuzzFingerprint(f *testing.F) {
	f.Add("billing", "call me", "billing", "call me ")
	f.Add("a", "", "", "a")
	f.Add("\u00e9", "x", "e\u0301", "x")
	f.Fuzz(func(t *testing.T, topic, note, topic2, note2 string) {
		a, err := Fingerprint(map[string]any{"topic": topic, "note": note})
		if valid := utf8.ValidString(topic) && utf8.ValidString(note); valid != (err == nil) {
			t.Fatalf("Fingerprint(%q, %q): %v", topic, note, err)
		}
		if err != nil {
			return
		}
		b, _ := Fingerprint(map[string]any{"note": note, "topic": topic})
		if a != b {
			t.Fatalf("field order changed the fingerprint of %q, %q", topic, note)
		}
		c, err := Fingerprint(map[string]any{"topic": topic2, "note": note2})
		if err != nil {
			return
		}
		if (topic == topic2 && note == note2) != (a == c) {
			t.Fatalf("(%q, %q) and (%q, %q): fingerprints %s and %s", topic, note, topic2, note2, a, c)
		}
	})
}
