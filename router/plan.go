package router

// nextRun returns the end of the run that starts at call i (docs/protocol.md
// 5.2): a maximal stretch of concurrency-safe calls, which run in
// parallel, or one unsafe call alone. safe reports call k's safety as the
// batch's calls resolve now; a reset_tools call or a skill load changes
// what later calls resolve to, so the plan is made one run at a time.
func nextRun(i, n int, safe func(k int) bool) int {
	j := i + 1
	if safe(i) {
		for j < n && safe(j) {
			j++
		}
	}
	return j
}
