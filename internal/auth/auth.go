// Package auth maps bearer tokens to actors. It keeps only the SHA-256 of
// each token, so neither configuration nor memory holds a token in clear.
package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Tokens maps the hex SHA-256 of a token to its actor.
type Tokens map[string]string

// Hash returns the hex SHA-256 of token, as Tokens holds it.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Parse reads "actor:sha256hex,actor:sha256hex".
func Parse(spec string) (Tokens, error) {
	t := Tokens{}
	for entry := range strings.SplitSeq(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		actor, hash, ok := strings.Cut(entry, ":")
		hash = strings.ToLower(hash)
		if b, err := hex.DecodeString(hash); !ok || actor == "" || err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("token entry %d: want actor:sha256-hex-of-token", len(t)+1)
		}
		t[hash] = actor
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("no tokens configured")
	}
	return t, nil
}

// Actor returns the actor of token.
func (t Tokens) Actor(token string) (string, bool) {
	actor, ok := t[Hash(token)]
	return actor, ok
}
