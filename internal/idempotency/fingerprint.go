package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Fingerprint returns the hex SHA-256 of the canonical encoding of a
// request's significant fields, those that make two requests the same intent
// (not display-only fields, not the scope). The encoding is JSON of the map,
// with sorted keys, so neither field order nor whitespace changes it.
//
// A string that is not valid UTF-8 is an error: JSON would replace its bad
// bytes with U+FFFD, and two different intents would share a fingerprint.
func Fingerprint(significant map[string]any) (string, error) {
	for name, v := range significant {
		if s, ok := v.(string); ok && !utf8.ValidString(s) {
			return "", fmt.Errorf("fingerprint: %s is not valid UTF-8", name)
		}
	}
	var buf [512]byte // a create's fields fit: no allocation
	b, ok := appendCanonical(buf[:0], significant)
	if !ok {
		var err error
		if b, err = json.Marshal(significant); err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
	}
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:]), nil
}

// maxCanonicalFields bounds the fields appendCanonical sorts on the stack;
// a map with more goes through encoding/json.
const maxCanonicalFields = 16

// appendCanonical appends what json.Marshal writes for m, byte for byte
// (FuzzCanonicalIsJSON), when every value of m is a string; otherwise it
// reports false and appends nothing. Measured in docs/bench.md.
func appendCanonical(dst []byte, m map[string]any) ([]byte, bool) {
	if len(m) > maxCanonicalFields {
		return dst, false
	}
	var names [maxCanonicalFields]string
	keys := names[:0]
	for k, v := range m {
		if _, ok := v.(string); !ok {
			return dst, false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, m[k].(string))
	}
	return append(dst, '}'), true
}

// appendJSONString appends s as encoding/json writes a valid UTF-8 string
// with HTML escaping (json.Marshal's): \" \\ \b \f \n \r \t, \u00XX for the
// other control characters and for < > &, and \u2028, \u2029.
func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 { // not valid UTF-8: as encoding/json
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
