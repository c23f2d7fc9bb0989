package idempotency

import "testing"

func TestFingerprint(t *testing.T) {
	base := map[string]any{"topic": "billing", "note": "call me"}
	fp := func(m map[string]any) string {
		t.Helper()
		s, err := Fingerprint(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := fp(base)
	if len(want) != 64 {
		t.Fatalf("fingerprint %q is not hex SHA-256", want)
	}
	same := []map[string]any{
		{"note": "call me", "topic": "billing"}, // another insertion order
	}
	for _, m := range same {
		if got := fp(m); got != want {
			t.Errorf("Fingerprint(%v) = %s, want %s", m, got, want)
		}
	}
	different := []map[string]any{
		{"topic": "billing", "note": "call me "},
		{"topic": "Billing", "note": "call me"},
		{"topic": "billing"},
		{"topic": "billing", "note": ""},
		{"topic": "billingcall me", "note": ""}, // no ambiguity from concatenation
		{"topic": "billing", "note": "call me", "extra": 1},
	}
	for _, m := range different {
		if got := fp(m); got == want {
			t.Errorf("Fingerprint(%v) equals that of %v", m, base)
		}
	}
}
