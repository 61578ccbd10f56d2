package bench

import (
	"runtime/debug"
	"time"

	"github.com/prometheus/procfs"
)

// The machine's and this process's figures from /proc; each is 0 (or "")
// where there is no /proc.

// memKB is this process's resident set size and its peak, in kB.
func memKB() (rss, hwm int64) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024)
}

// machineBusy is the CPU time every process on the machine has used since
// boot (all of /proc/stat's but idle and iowait; guest time is already in
// user).
func machineBusy() time.Duration {
	st, err := procfs.NewStat()
	if err != nil {
		return 0
	}
	c := st.CPUTotal
	return time.Duration((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * float64(time.Second))
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return 0
	}
	return l.Load1
}

func cpuModel() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ""
	}
	cpus, err := fs.CPUInfo()
	if err != nil || len(cpus) == 0 {
		return ""
	}
	return cpus[0].ModelName
}

// revision is the vcs revision stamped into the binary, if any, "+dirty"
// when modified.
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
