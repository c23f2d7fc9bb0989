package idempotency

import (
	"regexp"
	"strings"

	"github.com/demo-api/demo-api/internal/apperr"
)

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 255

// ParseKey returns the key of the Idempotency-Key header values: a structured-field
// string ("abc", RFC 8941) or the same bare (abc), 1 to 255 visible ASCII characters.
// Errors: idempotency_key_missing; idempotency_key_invalid (sent twice, or malformed).
func ParseKey(values []string) (string, error) {
	if len(values) == 0 {
		return "", apperr.Errorf(apperr.KeyMissing, "the Idempotency-Key header is required")
	}
	if len(values) > 1 {
		return "", apperr.Errorf(apperr.KeyInvalid, "send the Idempotency-Key header once")
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", apperr.Errorf(apperr.KeyMissing, "the Idempotency-Key header is empty")
	}
	key := v
	if v[0] == '"' {
		m := sfString.FindStringSubmatch(v)
		if m == nil {
			return "", apperr.Errorf(apperr.KeyInvalid, "the Idempotency-Key header is not a valid quoted string")
		}
		key = sfEscape.ReplaceAllString(m[1], "$1")
	}
	if len(key) == 0 || len(key) > MaxKeyLen {
		return "", apperr.Errorf(apperr.KeyInvalid, "the idempotency key must be 1 to %d characters", MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", apperr.Errorf(apperr.KeyInvalid, "the idempotency key must be visible ASCII characters only")
		}
	}
	return key, nil
}

// sfString is a structured-field string: its only escapes (sfEscape) are \" and \\.
var (
	sfString = regexp.MustCompile(`^"((?:[^"\\]|\\["\\])*)"$`)
	sfEscape = regexp.MustCompile(`\\(["\\])`)
)
