// Package room is the workshop room's authentication: any bearer token of
// the form dev-<name> is a participant, with no secret at all. It is for a
// room of people trying the service, never for anything else. A
// participant's actor is the token itself, dev-<name>, a name no configured
// actor may have in a room (Check): the token dev-alice is never the actor
// alice. The server takes it as its Authenticate (httpapi.Deps), beside the
// configured tokens.
package room

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/demo-api/demo-api/internal/auth"
)

// TokenPrefix starts every token of a workshop room, dev-<name>, and so
// every participant's actor.
const TokenPrefix = "dev-"

// name is a participant's name: 1 to 32 lowercase letters, digits, dots,
// underscores and hyphens, starting with a letter or a digit.
var name = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

// NameRule says what a participant's token must be, for people.
const NameRule = "a participant's token is dev-<name>, where <name> is 1 to 32 lowercase letters, digits, '.', '_' or '-', " +
	"starting with a letter or a digit (e.g. dev-ana)"

// errNotParticipant is a 401's detail in a room.
var errNotParticipant = errors.New("in this workshop room " + NameRule)

// Actor returns the actor of a workshop room's token dev-<name>: the token
// itself, a scope of its own. Anyone can send any such token, so a room is
// only for a workshop.
func Actor(token string) (string, bool) {
	n, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok || !name.MatchString(n) {
		return "", false
	}
	return token, true
}

// Authenticate is Actor as httpapi.Deps.Authenticate takes it: a token
// that is no participant's is refused with the rule of the names.
func Authenticate(token string) (string, error) {
	if actor, ok := Actor(token); ok {
		return actor, nil
	}
	return "", errNotParticipant
}

// Check returns an error naming a configured actor of t whose name a
// participant of a workshop room could have (dev-…): the room's tokens,
// which have no secret, would act as that actor.
func Check(t auth.Tokens) error {
	for _, actor := range t {
		if strings.HasPrefix(actor, TokenPrefix) {
			return fmt.Errorf("the actor %q has a name of a workshop room's participants (%s…), so anyone could act as it with the token %s; "+
				"rename it, or leave the room off", actor, TokenPrefix, actor)
		}
	}
	return nil
}

// Open returns the room's Authenticate for a server whose configured
// tokens are tokens, with the workshop knobs on or not, or why the room
// cannot open there.
func Open(workshop bool, tokens auth.Tokens) (func(token string) (string, error), error) {
	if !workshop {
		return nil, errors.New("WORKSHOP_ROOM needs WORKSHOP=true: a room is a workshop's")
	}
	if err := Check(tokens); err != nil {
		return nil, fmt.Errorf("API_TOKENS with WORKSHOP_ROOM: %w", err)
	}
	return Authenticate, nil
}
