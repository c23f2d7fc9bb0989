package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

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

// TestFingerprintOfOtherValues: a map with a value other than a string
// goes through encoding/json, as before, and gets the same fingerprint as
// its JSON.
func TestFingerprintOfOtherValues(t *testing.T) {
	m := map[string]any{"requestId": "r1", "count": 3, "tags": []string{"a", "b"}}
	got, err := Fingerprint(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	sum := sha256.Sum256(b)
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Fingerprint(%v) = %s, want %s", m, got, want)
	}
}

// TestFingerprintIsStable: the fingerprint of a create's fields is the one
// stored keys hold (hex SHA-256 of json.Marshal's bytes), so a retry after
// an upgrade still matches.
func TestFingerprintIsStable(t *testing.T) {
	got, err := Fingerprint(map[string]any{"topic": "billing", "note": "<call> me & \"you\"\n\u2028"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"note":"\u003ccall\u003e me \u0026 \"you\"\n\u2028","topic":"billing"}`
	sum := sha256.Sum256([]byte(want))
	if got != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint = %s, want the SHA-256 of %s", got, want)
	}
}
