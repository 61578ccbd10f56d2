package security

import "testing"

// TestAttackOutputsFillDisk (session 32, red team on 5.9: a gap in files
// this round did not own). P_outputs has no byte bound by default
// (store.Config.OutputsMaxBytes, --outputs-max-bytes: "no bound but the
// TTL"), so an agent whose tools may produce large outputs (the built-in
// shell or read_file, up to max_output, 64 MiB a call) stores 64 MiB per
// call for 24 hours: a thousand calls fill 64 GB of the store's disk. Any
// worker may also publish chunks without metadata up to the same bound.
func TestAttackOutputsFillDisk(t *testing.T) {
	t.Skip("GAP: store/store.go: OBJ_P_outputs is unbounded by default; bound it (as P_AUDIT since 1.22: a refused new object, never an old one dropped) or bound outputs per session")
}
