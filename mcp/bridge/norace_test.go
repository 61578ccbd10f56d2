//go:build !race

package bridge

// floodNotices is the flood of issue 26, item 8.
const floodNotices = 200000
