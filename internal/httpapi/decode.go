package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/demo-api/demo-api/internal/apperr"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 64 << 10

// decodeJSON decodes the body of r into v, a pointer to a struct: exactly
// one JSON object, of media type application/json, at most MaxBodyBytes long,
// whose members are fields of v spelled exactly, each once, none null.
// (encoding/json alone would match names case-insensitively, let the last of
// two duplicates win, and read null as the zero value.)
//
// Errors: unsupported_media_type, body_too_large, malformed_json,
// unknown_field, invalid_field.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return apperr.Errorf(apperr.UnsupportedMediaType, "send the body as Content-Type: application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return apperr.Errorf(apperr.UnsupportedMediaType, "send the body in UTF-8 (charset=%q is not)", cs)
	}
	body, err := ReadBody(w, r, MaxBodyBytes)
	if err != nil {
		return err
	}
	if !utf8.Valid(body) {
		// encoding/json would replace the bad bytes with U+FFFD, and two
		// different bodies would then be the same intent.
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid UTF-8")
	}
	if err := checkMembers(body, jsonFields(v)); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return apperr.Errorf(apperr.InvalidField, "%s must be a %s", typeErr.Field, jsonKind(typeErr.Type.Kind()))
		}
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// ReadBody reads the body of r, at most limit bytes: the one way every
// route reads a body, so that a body too large, or one that breaks off or
// never arrives (the server's read timeout), gets the same answer on every
// route.
//
// Errors: body_too_large, malformed_json (the body could not be read).
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// Declared over the limit: answered before the body is read, not
		// after the read timeout of a body that may never come. On a
		// connection it keeps, Go's server would first read (and wait for)
		// an unread body of up to 256 KiB: this one is closed instead.
		w.Header().Set("Connection", "close")
		return nil, apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		return nil, apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", limit)
	} else if err != nil {
		return nil, apperr.Errorf(apperr.MalformedJSON, "the body could not be read")
	}
	return body, nil
}

// checkMembers checks the members of the JSON object in body against fields.
func checkMembers(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	malformed := func(err error) error {
		switch {
		case err == io.EOF && len(bytes.TrimSpace(body)) == 0:
			return apperr.Errorf(apperr.MalformedJSON, "the body is empty")
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			return apperr.Errorf(apperr.MalformedJSON, "the body ends before the JSON value is complete")
		}
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if tok, err := dec.Token(); err != nil {
		return malformed(err)
	} else if tok != json.Delim('{') {
		return apperr.Errorf(apperr.MalformedJSON, "the body must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(err)
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return malformed(err)
		}
		switch {
		case !fields[name]:
			return apperr.Errorf(apperr.UnknownField, "%q is not a field of this request", name)
		case seen[name]:
			return apperr.Errorf(apperr.InvalidField, "%s appears twice", name)
		case string(value) == "null":
			return apperr.Errorf(apperr.InvalidField, "%s must not be null; leave it out instead", name)
		case loneSurrogate(value):
			return apperr.Errorf(apperr.InvalidField, "%s holds a lone UTF-16 surrogate escape (such as \\ud800), which is no character", name)
		case hasNUL(value):
			return apperr.Errorf(apperr.InvalidField, "%s must not contain the NUL character", name)
		}
		seen[name] = true
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.Errorf(apperr.MalformedJSON, "the body holds more than one JSON value")
	}
	return nil
}

// jsonFields returns the JSON member names of the struct v points to.
func jsonFields(v any) map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Bool:
		return "boolean"
	default:
		return "number"
	}
}

// loneSurrogate reports whether the JSON text v holds a \u escape of a
// UTF-16 surrogate that is not half of a pair: encoding/json would read it as
// U+FFFD, so "\ud800" and "\ufffd" would be the same intent.
func loneSurrogate(v []byte) bool {
	s := string(v)
	for i := 0; i+6 <= len(s); i++ {
		if s[i] == '\\' && s[i+1] == '\\' {
			i++ // an escaped backslash: what follows is text
			continue
		}
		if s[i] != '\\' || s[i+1] != 'u' {
			continue
		}
		r := hexRune(s[i+2 : i+6])
		switch {
		case utf16.IsSurrogate(r) && r < 0xDC00: // high: a low must follow
			if i+12 > len(s) || s[i+6:i+8] != `\u` || !(hexRune(s[i+8:i+12]) >= 0xDC00 && hexRune(s[i+8:i+12]) <= 0xDFFF) {
				return true
			}
			i += 11
		case utf16.IsSurrogate(r): // a low on its own
			return true
		default:
			i += 5
		}
	}
	return false
}

func hexRune(h string) rune {
	n, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

// hasNUL reports whether the JSON string v holds the NUL character, which
// PostgreSQL cannot store in text.
func hasNUL(v []byte) bool {
	var s string
	return len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil && strings.ContainsRune(s, 0)
}
