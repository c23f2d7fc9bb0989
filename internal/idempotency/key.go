package idempotency

import (
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
		var ok bool
		if key, ok = unquote(v); !ok {
			return "", apperr.Errorf(apperr.KeyInvalid, "the Idempotency-Key header is not a valid quoted string")
		}
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

// unquote decodes a structured-field string, whose only escapes are \" and \\.
func unquote(v string) (string, bool) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case '"':
			return b.String(), i == len(v)-1
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}
