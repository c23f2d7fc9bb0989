// Package body reads a request's body strictly, before anything is decided:
// one JSON object of known members, each once, within a size bound. The
// fingerprint of a request is taken from what it decodes, so a body that a
// lenient parser could read two ways must be refused, not guessed at.
package body

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/demo-api/demo-api/internal/apperr"
)

// MaxBytes bounds a request body: its fields are stored with the
// business row, and in the answer a key replays for a whole TTL.
const MaxBytes = 64 << 10

// DecodeJSON decodes the body of r into v, a pointer to a struct: one JSON
// object, at most MaxBytes, whose members are fields of v spelled exactly,
// each once, none null (encoding/json would take another case, duplicates, null).
// It is strict because the fingerprint is taken from what it decodes: a body
// that encoding/json reads leniently could mean two things, and two intents
// would then share a key without a mismatch.
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
	body, err := Read(w, r, MaxBytes)
	if err != nil {
		return err
	}
	if !utf8.Valid(body) {
		// encoding/json would read bad bytes as U+FFFD: two bodies, one intent.
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid UTF-8")
	}
	if err := checkMembers(body, jsonFields(v)); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return apperr.Errorf(apperr.InvalidField, "%s must not be a %s", typeErr.Field, typeErr.Value)
		}
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// Read reads r's body, at most limit bytes. Errors: body_too_large, malformed_json (unread).
// It reads the body whole before anything is decided: a body cut short by the
// client is a malformed request, never half an intent.
func Read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	tooLarge := apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", limit)
	if r.ContentLength > limit {
		// Answered before the body is read; the connection closes, or Go would read it first.
		w.Header().Set("Connection", "close")
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		return nil, tooLarge
	} else if err != nil {
		return nil, apperr.Errorf(apperr.MalformedJSON, "the body could not be read")
	}
	return body, nil
}

// checkMembers checks the members of the JSON object in body against fields,
// token by token, before encoding/json sees it: an unknown member is refused
// (a client's typo must not vanish), and so is a member sent twice (which one
// counts would depend on the parser).
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
		esc := badEscape(value)
		switch {
		case !fields[name]:
			return apperr.Errorf(apperr.UnknownField, "%q is not a field of this request", name)
		case seen[name]:
			return apperr.Errorf(apperr.InvalidField, "%s appears twice", name)
		case string(value) == "null":
			return apperr.Errorf(apperr.InvalidField, "%s must not be null; leave it out instead", name)
		case esc == `\u0000`:
			return apperr.Errorf(apperr.InvalidField, "%s must not contain the NUL character", name)
		case esc != "":
			return apperr.Errorf(apperr.InvalidField, "%s holds a lone UTF-16 surrogate escape (such as \\ud800), which is no character", name)
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

// escapes matches an escaped backslash (what follows is text), a surrogate
// pair, and a lone surrogate or NUL escape.
var escapes = regexp.MustCompile(`(?i)\\\\|\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|\\u(?:d[89a-f][0-9a-f]{2}|0000)`)

// badEscape returns the first escape in the JSON text v of a character not
// stored as sent, or "": a lone surrogate (encoding/json reads it as U+FFFD),
// or NUL (PostgreSQL text cannot hold it).
func badEscape(v []byte) string {
	for _, m := range escapes.FindAll(v, -1) {
		if len(m) == len(`\u0000`) {
			return string(m)
		}
	}
	return ""
}
