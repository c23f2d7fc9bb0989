package postgres

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// The stored answer's headers (response_headers) are a jsonb object of
// strings, written by every create and read by every replay, so they are
// encoded and decoded here by hand (measured in docs/bench.md); anything the
// fast paths do not expect goes through encoding/json.

// encodeHeaders returns h as a JSON object, its members sorted by name
// (jsonb keeps its own order, so the order is only for a stable text).
func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 || len(h) > 8 {
		b, err := json.Marshal(h)
		return string(b), err
	}
	var names [8]string
	keys := names[:0]
	n := 2
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			b, err := json.Marshal(h) // bad bytes become U+FFFD
			return string(b), err
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, n+8)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONText(b, k)
		b = append(b, ':')
		b = appendJSONText(b, h[k])
	}
	b = append(b, '}')
	return string(b), nil
}

// appendJSONText appends s, valid UTF-8, as a JSON string: ", \ and the
// control characters escaped.
func appendJSONText(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		if c == '"' || c == '\\' {
			dst = append(dst, '\\', c)
		} else {
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// decodeHeaders reads a stored answer's headers: jsonb's text of an object
// of strings, `{"Location": "/v1/…", "Content-Type": "application/json"}`.
// A text with an escape, or of any other shape, goes through encoding/json.
// The names and values share one copy of text: a replay's headers cost that
// copy and the map.
func decodeHeaders(text []byte) (map[string]string, error) {
	if h, ok := scanHeaders(text); ok {
		return h, nil
	}
	var h map[string]string
	err := json.Unmarshal(text, &h)
	return h, err
}

// scanHeaders reads text as jsonb writes an object of strings without
// escapes; ok false for anything else.
func scanHeaders(text []byte) (h map[string]string, ok bool) {
	s := string(text) // the one copy: the names and values are its parts
	if strings.IndexByte(s, '\\') >= 0 || len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	s = s[1 : len(s)-1]
	h = make(map[string]string, strings.Count(s, `": "`))
	for s != "" {
		var k, v string
		if k, s, ok = cutJSONString(s); !ok || !strings.HasPrefix(s, ": ") {
			return nil, false
		}
		if v, s, ok = cutJSONString(s[2:]); !ok {
			return nil, false
		}
		h[k] = v
		if s == "" {
			break
		}
		if !strings.HasPrefix(s, ", ") {
			return nil, false
		}
		s = s[2:]
	}
	return h, true
}

// cutJSONString cuts the JSON string without escapes at the start of s,
// and returns its text (sharing s's memory) and the rest.
func cutJSONString(s string) (str, rest string, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	return s[1 : 1+end], s[2+end:], true
}
