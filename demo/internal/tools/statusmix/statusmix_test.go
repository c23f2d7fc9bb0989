package statusmix

import "testing"

func TestMix(t *testing.T) {
	m := Mix{201: 2}
	m.Add(Mix{201: 1, 0: 2, 409: 1})
	if got, want := m.String(), "none×2 201×3 409×1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (Mix{}).String(); got != "" {
		t.Errorf("empty: %q", got)
	}
}
