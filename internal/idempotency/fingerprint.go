package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Fingerprint returns the hex SHA-256 of the canonical encoding of the
// significant fields of a request: the fields that make two requests the same
// intent. The caller leaves out display-only fields; the scope (actor,
// operation) is not part of it.
//
// The canonical encoding is JSON of the map, whose keys encoding/json sorts, so
// neither the order of fields in the request body nor its whitespace changes
// the fingerprint.
func Fingerprint(significant map[string]any) (string, error) {
	b, err := json.Marshal(significant)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
