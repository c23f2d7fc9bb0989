package provider

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
)

// The statements of an expedite's resources. Each call about a slot or a
// charge runs in one transaction that first takes the desk's lock of that
// slot or charge (lockSQL): the calls about one slot (its reserve, its
// release, its charges) and about one charge (its attempts, its refund)
// take their turn, and each statement after the lock sees what the call
// before committed. Unlike acceptSQL, no statement has to be run again
// because a concurrent first call committed after its snapshot.

// lockSQL takes the desk's lock of one slot ("slot", its key) or one charge
// ("charge", its key) until the transaction ends. The two-number form of
// an advisory lock keeps these apart from any one-number advisory lock of
// a database the desk shares; two names that hash alike only wait for each
// other.
const lockSQL = `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`

// slotSQL reads the slot under a key, in its current state.
const slotSQL = `
SELECT key, fingerprint, reference, accepted_at, state, hold_until, coalesce(released_by, '') AS released_by
FROM slots WHERE key = $1`

// reserveSlotSQL stores a new slot, held until the end of its hold from
// now, or released from the start when its release came first. The caller
// holds the slot's lock and has read that the key is free.
const reserveSlotSQL = `
INSERT INTO slots (key, fingerprint, request_id, account, reference, accepted_at, hold_until, state, released_by)
SELECT $1, $2, $3, $4, 'RS-' || lpad(nextval('slot_refs')::text, 6, '0'),
       statement_timestamp(), statement_timestamp() + make_interval(secs => $5),
       CASE WHEN released THEN 'released' ELSE 'held' END,
       CASE WHEN released THEN 'release' END
FROM (SELECT EXISTS (SELECT 1 FROM releases WHERE slot_key = $1) AS released) AS release
RETURNING key, fingerprint, reference, accepted_at, state, hold_until, coalesce(released_by, '') AS released_by`

// releaseSQL reads the release under a key.
const releaseSQL = `SELECT key, slot_key AS fingerprint, reference, accepted_at FROM releases WHERE key = $1`

// releaseOfSQL reads the release under a key or, failing that, the release
// of a slot: the one release that decides a new one's answer.
const releaseOfSQL = `
SELECT key, slot_key AS fingerprint, reference, accepted_at FROM releases
WHERE key = $1 OR slot_key = $2
ORDER BY key = $1 DESC LIMIT 1`

// slotStateSQL reads the state of the slot under a key.
const slotStateSQL = `SELECT state FROM slots WHERE key = $1`

// insertReleaseSQL stores a release. A release of another slot under the
// same key, committed meanwhile, wins: the caller then reads it.
const insertReleaseSQL = `
INSERT INTO releases (key, slot_key, reference, accepted_at)
VALUES ($1, $2, 'RL-' || lpad(nextval('release_refs')::text, 6, '0'), statement_timestamp())
ON CONFLICT (key) DO NOTHING
RETURNING key, slot_key AS fingerprint, reference, accepted_at`

// releaseSlotSQL releases the slot under a key if it is held (it may not
// exist yet, or its hold may have ended and the sweep released it).
const releaseSlotSQL = `UPDATE slots SET state = 'released', released_by = 'release' WHERE key = $1 AND state = 'held'`

// chargeSQL reads the charge under a key, refunded if a refund of it is kept.
const chargeSQL = `
SELECT c.key, c.fingerprint, c.reference, c.accepted_at, c.slot_key, c.account, c.amount,
       CASE WHEN r.key IS NULL THEN 'charged' ELSE 'refunded' END AS state,
       coalesce(r.reference, '') AS refund_reference
FROM charges c LEFT JOIN refunds r ON r.charge_key = c.key
WHERE c.key = $1`

// refundKeptSQL tells whether a refund of the charge under a key is kept.
const refundKeptSQL = `SELECT EXISTS (SELECT 1 FROM refunds WHERE charge_key = $1)`

// takeSlotSQL marks the slot under a key charged if it is held for the
// account and its hold has not ended: the one statement that decides
// slot_not_held. A release of the slot waits for the slot's lock; a sweep
// skips the row while a charge holds it, and a charge that meets a sweep's
// row waits for it and reads the row the sweep left.
const takeSlotSQL = `
UPDATE slots SET state = 'charged'
WHERE key = $1 AND account = $2 AND state = 'held' AND hold_until > statement_timestamp()`

// openAccountSQL gives an account its starting credit the first time the
// desk charges it.
const openAccountSQL = `INSERT INTO accounts (account, credit) VALUES ($1, $2) ON CONFLICT (account) DO NOTHING`

// debitSQL takes $3 from the account if its credit covers the amount $2:
// the one statement that decides insufficient_credit. $3 is the amount, or
// 0 for a charge whose refund came first.
const debitSQL = `UPDATE accounts SET credit = credit - $3 WHERE account = $1 AND credit >= $2`

// insertChargeSQL stores a charge. The caller holds the charge's lock and
// has read that the key is free.
const insertChargeSQL = `
INSERT INTO charges (key, fingerprint, request_id, account, amount, slot_key, reference, accepted_at)
VALUES ($1, $2, $3, $4, $5, $6, 'CH-' || lpad(nextval('charge_refs')::text, 6, '0'), statement_timestamp())`

// refundSQL reads the refund under a key.
const refundSQL = `SELECT key, charge_key AS fingerprint, reference, accepted_at FROM refunds WHERE key = $1`

// refundOfSQL reads the refund under a key or, failing that, the refund of
// a charge: the one refund that decides a new one's answer.
const refundOfSQL = `
SELECT key, charge_key AS fingerprint, reference, accepted_at FROM refunds
WHERE key = $1 OR charge_key = $2
ORDER BY key = $1 DESC LIMIT 1`

// insertRefundSQL stores a refund. A refund of another charge under the
// same key, committed meanwhile, wins: the caller then reads it.
const insertRefundSQL = `
INSERT INTO refunds (key, charge_key, reference, accepted_at)
VALUES ($1, $2, 'RF-' || lpad(nextval('refund_refs')::text, 6, '0'), statement_timestamp())
ON CONFLICT (key) DO NOTHING
RETURNING key, charge_key AS fingerprint, reference, accepted_at`

// creditBackSQL gives the charge's amount back to its account, if the
// charge exists.
const creditBackSQL = `
UPDATE accounts SET credit = accounts.credit + charges.amount
FROM charges WHERE charges.key = $1 AND accounts.account = charges.account`

// expireHoldsSQL releases up to 1000 slots still held past their hold, and
// returns how many. SKIP LOCKED leaves a slot that a charge or a release
// is deciding, or another sweep is releasing, to them; FOR UPDATE reads
// the slot as the last one to change it left it, so each expired slot is
// released by exactly one statement.
const expireHoldsSQL = `
WITH expired AS (
    SELECT key FROM slots
    WHERE state = 'held' AND hold_until <= statement_timestamp()
    ORDER BY hold_until
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
)
UPDATE slots SET state = 'released', released_by = 'hold_expired'
FROM expired WHERE slots.key = expired.key`

// expireBatch is expireHoldsSQL's LIMIT.
const expireBatch = 1000

// statsSQL counts every resource, and reads each account's credit, in one
// snapshot.
const statsSQL = `
SELECT (SELECT count(*) FROM submissions) AS submissions,
       (SELECT count(*) FROM cancels) AS cancels,
       (SELECT count(*) FROM slots WHERE state = 'held') AS slots_held,
       (SELECT count(*) FROM slots WHERE state = 'charged') AS slots_charged,
       (SELECT count(*) FROM slots WHERE state = 'released') AS slots_released,
       (SELECT count(*) FROM releases) AS releases,
       (SELECT count(*) FROM charges) AS charges,
       (SELECT count(*) FROM refunds) AS refunds,
       (SELECT coalesce(json_object_agg(account, credit), '{}') FROM accounts) AS credit`

// slotRow is a slot as the desk answers it. Its Fingerprint is of the
// slot's request.
type slotRow struct {
	Receipt
	State      string    `json:"state" db:"state"` // held, charged or released
	HoldUntil  time.Time `json:"holdUntil" db:"hold_until"`
	ReleasedBy string    `json:"releasedBy,omitempty" db:"released_by"` // release or hold_expired, when released
}

// chargeRow is a charge as the desk answers it. Its Fingerprint is of the
// charge's request.
type chargeRow struct {
	Receipt
	SlotKey         string `json:"slotKey" db:"slot_key"`
	Account         string `json:"account" db:"account"`
	Amount          int    `json:"amount" db:"amount"`
	State           string `json:"state" db:"state"` // charged or refunded
	RefundReference string `json:"refundReference,omitempty" db:"refund_reference"`
}

// refusal is a definite no of the desk to a call: nothing was stored.
type refusal struct{ code, detail string }

func (r *refusal) Error() string { return r.code + ": " + r.detail }

var (
	errSlotNotHeld        = &refusal{"slot_not_held", "no slot is held under slotKey for this account: none, released, charged, or past its hold"}
	errInsufficientCredit = &refusal{"insufficient_credit", "the account's credit is less than the amount"}
	errSlotCharged        = &refusal{"slot_charged", "this slot was charged: it can no longer be released (refund the charge instead)"}
)

// inTx runs fn in one transaction that first takes the desk's lock of each
// (kind, key) of locks, in order, and commits unless fn fails.
func (st *store) inTx(ctx context.Context, locks [][2]string, fn func(*sqlx.Tx) error) error {
	tx, err := st.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	for _, l := range locks {
		if _, err := tx.ExecContext(ctx, lockSQL, l[0], l[1]); err != nil {
			return fmt.Errorf("lock the %s: %w", l[0], err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// getRow reads the one row of query into dest; found is false when there
// is none.
func getRow(ctx context.Context, q sqlx.QueryerContext, dest any, query string, args ...any) (found bool, err error) {
	err = sqlx.GetContext(ctx, q, dest, query, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// reserveSlot stores s under key unless the key is taken, held for hold,
// and returns the slot under the key and whether this call stored it.
func (st *store) reserveSlot(ctx context.Context, key, fp string, s deskclient.Slot, hold time.Duration) (row slotRow, fresh bool, err error) {
	err = st.inTx(ctx, [][2]string{{"slot", key}}, func(tx *sqlx.Tx) error {
		if found, err := getRow(ctx, tx, &row, slotSQL, key); err != nil || found {
			return err
		}
		fresh = true
		return tx.GetContext(ctx, &row, reserveSlotSQL, key, fp, s.RequestID, s.Account, hold.Seconds())
	})
	if err != nil {
		return slotRow{}, false, fmt.Errorf("reserve slot: %w", err)
	}
	return row, fresh, nil
}

// lookupSlot returns the slot under key; ok is false when the desk never
// accepted it.
func (st *store) lookupSlot(ctx context.Context, key string) (row slotRow, ok bool, err error) {
	ok, err = getRow(ctx, st.db, &row, slotSQL, key)
	return row, ok, err
}

// release stores the release of the slot under slotKey under key unless
// either is taken, and releases the slot if it is held. It returns the
// release there (its Fingerprint is the key of its slot) and whether this
// call stored it.
//
// Errors: errSlotCharged.
func (st *store) release(ctx context.Context, key, slotKey string) (rc Receipt, fresh bool, err error) {
	err = st.inTx(ctx, [][2]string{{"slot", slotKey}}, func(tx *sqlx.Tx) error {
		if found, err := getRow(ctx, tx, &rc, releaseOfSQL, key, slotKey); err != nil || found {
			return err
		}
		var state string
		if _, err := getRow(ctx, tx, &state, slotStateSQL, slotKey); err != nil {
			return err
		} else if state == "charged" {
			return errSlotCharged
		}
		if found, err := getRow(ctx, tx, &rc, insertReleaseSQL, key, slotKey); err != nil {
			return err
		} else if !found { // a release of another slot under this key
			return tx.GetContext(ctx, &rc, releaseSQL, key)
		}
		fresh = true
		_, err := tx.ExecContext(ctx, releaseSlotSQL, slotKey)
		return err
	})
	if err != nil {
		return Receipt{}, false, fmt.Errorf("release slot: %w", err)
	}
	return rc, fresh, nil
}

// lookupRelease returns the release under key (its Fingerprint is the key
// of its slot); ok is false when the desk never accepted it.
func (st *store) lookupRelease(ctx context.Context, key string) (Receipt, bool, error) {
	return st.get(ctx, releaseSQL, key)
}

// charge stores c under key unless the key is taken, and returns the charge
// under the key and whether this call stored it. A new charge marks its
// slot charged and debits its account, which starts with credit, in the
// same transaction; a charge whose refund came first is refunded from the
// start: its slot is charged, its account's credit checked and left as it
// was.
//
// Errors: errSlotNotHeld, errInsufficientCredit (nothing stored).
func (st *store) charge(ctx context.Context, key, fp string, c deskclient.Charge, credit int) (row chargeRow, fresh bool, err error) {
	err = st.inTx(ctx, [][2]string{{"charge", key}, {"slot", c.SlotKey}}, func(tx *sqlx.Tx) error {
		if found, err := getRow(ctx, tx, &row, chargeSQL, key); err != nil || found {
			return err
		}
		var refunded bool
		if err := tx.GetContext(ctx, &refunded, refundKeptSQL, key); err != nil {
			return err
		}
		if n, err := rowsAffected(tx.ExecContext(ctx, takeSlotSQL, c.SlotKey, c.Account)); err != nil {
			return err
		} else if n == 0 {
			return errSlotNotHeld
		}
		if _, err := tx.ExecContext(ctx, openAccountSQL, c.Account, credit); err != nil {
			return err
		}
		debit := c.Amount
		if refunded {
			debit = 0
		}
		if n, err := rowsAffected(tx.ExecContext(ctx, debitSQL, c.Account, c.Amount, debit)); err != nil {
			return err
		} else if n == 0 {
			return errInsufficientCredit
		}
		if _, err := tx.ExecContext(ctx, insertChargeSQL, key, fp, c.RequestID, c.Account, c.Amount, c.SlotKey); err != nil {
			return err
		}
		fresh = true
		return tx.GetContext(ctx, &row, chargeSQL, key)
	})
	if err != nil {
		return chargeRow{}, false, fmt.Errorf("charge: %w", err)
	}
	return row, fresh, nil
}

// lookupCharge returns the charge under key; ok is false when the desk
// never accepted it.
func (st *store) lookupCharge(ctx context.Context, key string) (row chargeRow, ok bool, err error) {
	ok, err = getRow(ctx, st.db, &row, chargeSQL, key)
	return row, ok, err
}

// refund stores the refund of the charge under chargeKey under key unless
// either is taken, and gives the charge's amount back if the charge exists
// (one that comes later is refunded from the start). It returns the refund
// there (its Fingerprint is the key of its charge) and whether this call
// stored it.
func (st *store) refund(ctx context.Context, key, chargeKey string) (rc Receipt, fresh bool, err error) {
	err = st.inTx(ctx, [][2]string{{"charge", chargeKey}}, func(tx *sqlx.Tx) error {
		if found, err := getRow(ctx, tx, &rc, refundOfSQL, key, chargeKey); err != nil || found {
			return err
		}
		if found, err := getRow(ctx, tx, &rc, insertRefundSQL, key, chargeKey); err != nil {
			return err
		} else if !found { // a refund of another charge under this key
			return tx.GetContext(ctx, &rc, refundSQL, key)
		}
		fresh = true
		_, err := tx.ExecContext(ctx, creditBackSQL, chargeKey)
		return err
	})
	if err != nil {
		return Receipt{}, false, fmt.Errorf("refund: %w", err)
	}
	return rc, fresh, nil
}

// lookupRefund returns the refund under key (its Fingerprint is the key of
// its charge); ok is false when the desk never accepted it.
func (st *store) lookupRefund(ctx context.Context, key string) (Receipt, bool, error) {
	return st.get(ctx, refundSQL, key)
}

// expireHolds releases every slot held past its hold, and returns how many
// this call released.
func (st *store) expireHolds(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := rowsAffected(st.db.ExecContext(ctx, expireHoldsSQL))
		if err != nil {
			return total, fmt.Errorf("release expired holds: %w", err)
		}
		total += int(n)
		if n < expireBatch {
			return total, nil
		}
	}
}

// stats are the desk's counts, as GET /v1/stats answers them.
func (st *store) stats(ctx context.Context) (deskclient.Stats, error) {
	var row struct {
		Submissions, Cancels                   int
		SlotsHeld, SlotsCharged, SlotsReleased int
		Releases, Charges, Refunds             int
		Credit                                 []byte
	}
	err := st.db.QueryRowContext(ctx, statsSQL).Scan(&row.Submissions, &row.Cancels,
		&row.SlotsHeld, &row.SlotsCharged, &row.SlotsReleased, &row.Releases, &row.Charges, &row.Refunds, &row.Credit)
	if err != nil {
		return deskclient.Stats{}, fmt.Errorf("stats: %w", err)
	}
	out := deskclient.Stats{Submissions: row.Submissions, Cancels: row.Cancels,
		Slots:    deskclient.SlotCounts{Held: row.SlotsHeld, Charged: row.SlotsCharged, Released: row.SlotsReleased},
		Releases: row.Releases, Charges: row.Charges, Refunds: row.Refunds}
	if err := json.Unmarshal(row.Credit, &out.Credit); err != nil {
		return deskclient.Stats{}, fmt.Errorf("stats: the credit: %w", err)
	}
	return out, nil
}

// rowsAffected is the count of rows of an Exec's result.
func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
