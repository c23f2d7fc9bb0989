package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Fingerprint returns the hex SHA-256 of the JSON of a request's significant
// fields (sorted keys). A string not valid UTF-8 is an error: JSON would make
// its bad bytes U+FFFD, and two intents would share a fingerprint.
func Fingerprint(significant map[string]any) (string, error) {
	for name, v := range significant {
		if s, ok := v.(string); ok && !utf8.ValidString(s) {
			return "", fmt.Errorf("fingerprint: %s is not valid UTF-8", name)
		}
	}
	b, err := json.Marshal(significant)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
