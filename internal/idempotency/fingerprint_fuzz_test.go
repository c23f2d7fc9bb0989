package idempotency

import (
	"encoding/json"
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

// FuzzCanonicalIsJSON: the canonical encoding written without reflection
// is json.Marshal's, byte for byte, so a fingerprint stored before it
// existed still matches its retry.
func FuzzCanonicalIsJSON(f *testing.F) {
	f.Add("topic", "billing", "note", "call me")
	f.Add("a<b>&c", "\"\\\b\f\n\r\t\x00\x1f\x7f", "\u2028", "\u2029 é \ufffd \xff")
	f.Add("", "", "z", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m := map[string]any{k1: v1, k2: v2}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendCanonical(nil, m)
		if !ok || string(got) != string(want) {
			t.Fatalf("appendCanonical(%q) = %q, %v; json.Marshal: %q", m, got, ok, want)
		}
	})
}
