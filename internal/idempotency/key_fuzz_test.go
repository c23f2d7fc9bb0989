package idempotency

import (
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/apperr"
)

// FuzzIdempotencyKey: ParseKey never panics; a key it accepts is 1 to
// MaxKeyLen visible ASCII characters and is what the header said, bare or as
// a quoted string; its quoted form (and its bare form, unless that starts
// with a quote) parses back to it; and it refuses only with the key codes,
// idempotency_key_missing exactly when the header is absent or blank, and
// idempotency_key_invalid whenever the header is sent twice.
func FuzzIdempotencyKey(f *testing.F) {
	for _, v := range []string{"abc-123", `"abc-123"`, "  abc\t", `"a\"b\\c"`, `"abc`, `"a\nb"`, `"abc";v=1`,
		`"a", "b"`, "clé", "a b", "", "   ", `""`, `"\"a\""`, strings.Repeat("k", MaxKeyLen+1)} {
		f.Add(v, false)
	}
	f.Add("abc", true)
	f.Fuzz(func(t *testing.T, header string, twice bool) {
		values := []string{header}
		if twice {
			values = append(values, header)
		}
		key, err := ParseKey(values)
		if err != nil {
			code := apperr.Code(err)
			blank := strings.Trim(header, " \t") == ""
			switch {
			case twice && code != apperr.KeyInvalid:
				t.Fatalf("ParseKey(%q twice): %s (%v), want %s", header, code, err, apperr.KeyInvalid)
			case !twice && blank != (code == apperr.KeyMissing):
				t.Fatalf("ParseKey(%q): %s (%v)", header, code, err)
			case code != apperr.KeyMissing && code != apperr.KeyInvalid:
				t.Fatalf("ParseKey(%q): %s (%v), want a key code", header, code, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q) refused with %v but returned %q", header, err, key)
			}
			return
		}
		if twice {
			t.Fatalf("ParseKey(%q twice) = %q, want %s", header, key, apperr.KeyInvalid)
		}
		if len(key) < 1 || len(key) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: %d bytes", header, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x at %d is not visible ASCII", header, key, key[i], i)
			}
		}
		v := strings.Trim(header, " \t")
		if v != key && v != quote(key) {
			t.Fatalf("ParseKey(%q) = %q, which the header does not say", header, key)
		}
		if got, err := ParseKey([]string{quote(key)}); err != nil || got != key {
			t.Fatalf("the quoted form %s of %q parses to %q, %v", quote(key), key, got, err)
		}
		if key[0] != '"' {
			if got, err := ParseKey([]string{key}); err != nil || got != key {
				t.Fatalf("the bare form of %q parses to %q, %v", key, got, err)
			}
		}
	})
}

// quote is key as a structured-field string.
func quote(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}
