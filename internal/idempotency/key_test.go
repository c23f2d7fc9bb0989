package idempotency

import (
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/apperr"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name   string
		values []string
		want   string
		code   string
	}{
		{"bare", []string{"abc-123"}, "abc-123", ""},
		{"quoted equals bare", []string{`"abc-123"`}, "abc-123", ""},
		{"uuid", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"surrounding spaces trimmed", []string{"  abc\t"}, "abc", ""},
		{"quoted with escapes", []string{`"a\"b\\c"`}, `a"b\c`, ""},
		{"all visible ascii", []string{"!#$%&'()*+,-./:;<=>?@[]^_`{|}~"}, "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", ""},
		{"255 characters", []string{long}, long, ""},
		{"255 characters quoted", []string{`"` + long + `"`}, long, ""},
		{"missing", nil, "", apperr.KeyMissing},
		{"empty", []string{""}, "", apperr.KeyMissing},
		{"only spaces", []string{"   "}, "", apperr.KeyMissing},
		{"sent twice", []string{"a", "a"}, "", apperr.KeyInvalid},
		{"256 characters", []string{long + "k"}, "", apperr.KeyInvalid},
		{"inner space", []string{"a b"}, "", apperr.KeyInvalid},
		{"quoted inner space", []string{`"a b"`}, "", apperr.KeyInvalid},
		{"non-ascii", []string{"clé"}, "", apperr.KeyInvalid},
		{"control character", []string{"a\x01b"}, "", apperr.KeyInvalid},
		{"empty quoted", []string{`""`}, "", apperr.KeyInvalid},
		{"unterminated quote", []string{`"abc`}, "", apperr.KeyInvalid},
		{"bad escape", []string{`"a\nb"`}, "", apperr.KeyInvalid},
		{"parameters after string", []string{`"abc";v=1`}, "", apperr.KeyInvalid},
		{"two strings", []string{`"a", "b"`}, "", apperr.KeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.values)
			if code := codeOf(err); code != tt.code {
				t.Fatalf("ParseKey(%q) error code = %q (%v), want %q", tt.values, code, err, tt.code)
			}
			if got != tt.want {
				t.Fatalf("ParseKey(%q) = %q, want %q", tt.values, got, tt.want)
			}
		})
	}
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return apperr.Code(err)
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `"`, "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: length out of range", v, key)
		}
		for _, c := range []byte(key) {
			if c < 0x21 || c > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: not visible ASCII", v, key)
			}
		}
		// A key that needs no quoting reads the same bare and quoted.
		if !strings.ContainsAny(key, `"\`) {
			again, err := ParseKey([]string{`"` + key + `"`})
			if err != nil || again != key {
				t.Fatalf("quoted form of %q = %q, %v", key, again, err)
			}
		}
	})
}
