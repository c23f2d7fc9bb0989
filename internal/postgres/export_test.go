package postgres

// Statements returns the assembled key statements by name, for the test that
// keeps them in testdata as plain SQL to read.
func Statements() map[string]string {
	return map[string]string{
		"claim":                         claimStatements.free,
		"claim_takeover":                claimStatements.takeOver,
		"create_demo_request_one_phase": insertDemoRequest.onePhase.free,
		"create_demo_request_finish":    insertDemoRequest.finish,
		"cancel_demo_request_one_phase": cancelDemoRequest.onePhase.free,
		"outbox_take_due":               takeDueSQL,
		"outbox_settle":                 settleSQL,
		"outbox_accepted":               acceptedSQL,
		"outbox_requeued":               requeuedSQL,
	}
}
