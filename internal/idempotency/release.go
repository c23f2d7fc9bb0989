package idempotency

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

const (
	releaseTimeout = 5 * time.Second // bounds one attempt to release a claim
	releaseWait    = time.Second     // how long a request waits for its release; the release goes on
)

// retriedReleases is the Runner's Store: its Release goes on in the
// background until it succeeds or a lease has passed (then a retry takes the
// key over anyway), and returns the first attempt's error, waiting at most
// releaseWait for it. A claim whose release failed (the database restarting,
// say) would otherwise answer 409 for the rest of its lease. A late release
// is harmless: it deletes the key only while c's token still holds it.
type retriedReleases struct {
	Store
	lease time.Duration
}

func (s retriedReleases) Release(ctx context.Context, c Claim) error {
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.lease)
		defer cancel()
		for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
			actx, cancelAttempt := context.WithTimeout(ctx, releaseTimeout)
			err := s.Store.Release(actx, c)
			cancelAttempt()
			select {
			case first <- err: // the first attempt's, as the buffer is read once
			default:
			}
			if err == nil {
				return
			}
			time.Sleep(backoff/2 + rand.N(backoff/2))
		}
	}()
	select {
	case err := <-first:
		return err
	case <-time.After(releaseWait):
		return fmt.Errorf("no answer within %v", releaseWait)
	}
}
