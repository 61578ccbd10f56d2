// Package limits enforces quotas and rate limits on tool calls for every
// router of a deployment at once, with all state in JetStream:
//
//   - rates (calls per interval with a burst) are a GCRA (generic cell
//     rate algorithm) whose one value per key, the theoretical arrival
//     time, lives in the P_limits KV bucket and changes only by
//     compare-and-set, so two routers never both take the last slot;
//   - budgets (calls or cost units per UTC day) are JetStream counters
//     (Nats-Incr on a stream with allow_msg_counter, nats-server 2.12+):
//     one increment per call, whose acknowledged total says whether the
//     call fits, and a refused increment is taken back.
//
// A Rule names the calls it counts (tools, write tools only) and what it
// counts per (tool, user, session, tenant: any combination, none for one
// global count). Check either admits a call, having counted it against
// every rule it matches, or refuses it with the rule and when to retry;
// a refused call has counted against nothing. See docs/guardrails.md.
package limits
