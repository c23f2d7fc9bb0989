package body

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/demo-api/demo-api/internal/demo"
)

// FuzzDecodeCreate: the body decoder never panics, and a body it accepts
// is one the service stores faithfully: valid UTF-8, no NUL, and the same
// input once encoded and decoded again. Its seeds are the bodies below.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{`{"topic":"t","note":"n"}`, `{"topic":"a\ud83d\ude00"}`, `{"topic":"\ud800"}`,
		`{"topic":"x","clientLabel":"retry 2"}`, `{"topic":`, `{"topic":"\u0000"}`, "{\"topic\":\"\xff\"}", `{"topic":"\\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		decode := func(b []byte) (demo.CreateInput, error) {
			r := httptest.NewRequest(http.MethodPost, "/v1/demo-requests", bytes.NewReader(b))
			r.Header.Set("Content-Type", "application/json")
			var in demo.CreateInput
			err := DecodeJSON(httptest.NewRecorder(), r, &in)
			return in, err
		}
		in, err := decode(body)
		if err != nil {
			return
		}
		for _, s := range []string{in.Topic, in.Note, in.ClientLabel} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("accepted %q as %+v: not storable", body, in)
			}
			if strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(body, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
				t.Fatalf("accepted %q as %+v: a character was replaced", body, in)
			}
		}
		again, _ := json.Marshal(in)
		if back, err := decode(again); err != nil || back != in {
			t.Fatalf("%+v encoded as %s decodes to %+v, %v", in, again, back, err)
		}
	})
}
