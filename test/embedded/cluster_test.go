package embedded

import (
	"strings"
	"testing"
)

// clusterPrefix names the subtests that run on a cluster.
const clusterPrefix = "TestOnCluster/"

// onCluster reports whether t runs under TestOnCluster, where newEnv and
// killableDeployment start a 3-node cluster with replicas 3 instead of one
// node.
func onCluster(t *testing.T) bool { return strings.HasPrefix(t.Name(), clusterPrefix) }

// TestOnCluster runs the tests of everything that writes JetStream on a
// 3-node cluster with every bucket and stream replicated three times, where
// compare-and-set conflicts have other error codes, reads may be answered by
// followers and streams have leaders: every compare-and-set (sessions,
// registrations, parked records, continuations, the ledger) and every
// write that ends a call.
func TestOnCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"ExternalToolParkAndAnswer", TestExternalToolParkAndAnswer},
		{"RacingAnswersOneWins", TestRacingAnswersOneWins},
		{"QueuedCallsRunAfterAnswer", TestQueuedCallsRunAfterAnswer},
		{"QueuedBehindParkedRun", TestQueuedBehindParkedRun},
		{"CancelParkedCall", TestCancelParkedCall},
		{"ConfirmationFlow", TestConfirmationFlow},
		{"InboxAnswersRightAfterPark", TestInboxAnswersRightAfterPark},
		{"ResentParkedBatch", TestResentParkedBatch},
		{"Dedupe", TestDedupe},
		{"ResetToolsScenarios", TestResetToolsScenarios},
		{"ActivationSharedByRoutersAndSurvivesRestart", TestActivationSharedByRoutersAndSurvivesRestart},
		{"ConcurrentSessionUpdatesNeverLost", TestConcurrentSessionUpdatesNeverLost},
		{"ExternalScopeGroup", TestExternalScopeGroup},
		{"StateInjectedToolsPatchSessionState", TestStateInjectedToolsPatchSessionState},
		{"RegisterConflict", TestRegisterConflict},
		{"RegistrationSeenAtOnceByEveryRouter", TestRegistrationSeenAtOnceByEveryRouter},
		{"Events", TestEvents},
		{"EventsStoredBeforeReply", TestEventsStoredBeforeReply},
		{"WritingBatchAwaits", TestWritingBatchAwaits},
		{"WritingBatchDoneLost", TestWritingBatchDoneLost},
		{"Cancel", TestCancel},
		{"ParkedCallSurvivesRouterKill", TestParkedCallSurvivesRouterKill},
		{"BatchTakenOverFromKilledRouter", TestBatchTakenOverFromKilledRouter},
		{"DurableCall", TestDurableCall},
		{"DurableRedeliveredAfterWorkerKilled", TestDurableRedeliveredAfterWorkerKilled},
		{"DurableTimeout", TestDurableTimeout},
		{"LargeOutputs", TestLargeOutputs},
	} {
		t.Run(tc.name, tc.fn)
	}
}
