// Package auth maps bearer tokens to actors. It keeps only the SHA-256 of
// each token, so neither configuration nor memory holds a token in clear.
//
// A workshop room (RoomActor) is the one exception: there any token of the
// form dev-<name> is a participant, with no secret at all. It is for a room
// of people trying the service, never for anything else. A participant's
// actor is the token itself, dev-<name>, a name no configured actor may
// have in a room (CheckRoom): the token dev-alice is never the actor alice.
package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Tokens maps the hex SHA-256 of a token to its actor.
type Tokens map[string]string

// Hash returns the hex SHA-256 of token, the form Tokens and the
// configuration hold.
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

// RoomTokenPrefix starts every token of a workshop room, dev-<name>, and
// so every participant's actor.
const RoomTokenPrefix = "dev-"

// roomName is a participant's name: 1 to 32 lowercase letters, digits,
// dots, underscores and hyphens, starting with a letter or a digit.
var roomName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

// RoomNameRule says what a participant's token must be, for people.
const RoomNameRule = "a participant's token is dev-<name>, where <name> is 1 to 32 lowercase letters, digits, '.', '_' or '-', " +
	"starting with a letter or a digit (e.g. dev-ana)"

// RoomActor returns the actor of a workshop room's token dev-<name>: the
// token itself, a scope of its own. Anyone can send any such token, so a
// room is only for a workshop.
func RoomActor(token string) (string, bool) {
	name, ok := strings.CutPrefix(token, RoomTokenPrefix)
	if !ok || !roomName.MatchString(name) {
		return "", false
	}
	return token, true
}

// CheckRoom returns an error naming a configured actor of t whose name a
// participant of a workshop room could have (dev-…): the room's tokens,
// which have no secret, would act as that actor.
func CheckRoom(t Tokens) error {
	for _, actor := range t {
		if strings.HasPrefix(actor, RoomTokenPrefix) {
			return fmt.Errorf("the actor %q has a name of a workshop room's participants (%s…), so anyone could act as it with the token %s; "+
				"rename it, or leave the room off", actor, RoomTokenPrefix, actor)
		}
	}
	return nil
}
