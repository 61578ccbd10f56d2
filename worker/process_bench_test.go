package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/worker"
)

// BenchmarkWorkerProcess is what issue 27's worker row measures, the
// worker process's own CPU and allocations per read-only call, without the
// router's and the bench's noise: the worker (a typed echo tool, as the
// cross-process bench's) runs in a process of its own, this test binary
// run again, and this process holds the nats-server, the fake router that
// accepts its registration and 16 callers sending the exec request a
// router sends it (the compact form, docs/protocol.md 5.1); "worker-binary"
// is the same worker sent the binary form of 1.15 (a tool whose fleet
// holds a worker of 1.15). "raw" is the same child answering on a plain
// subscription with the data and a binary-mode result header (what the
// wire costs in nats.go). The child reports its getrusage CPU, its
// runtime's mallocs, bytes allocated and GC cycles before and after; so
// worker-µs/op is the whole worker process, its collector included (which
// the in-process benchmarks' labels leave out); its responder-µs/op is 0,
// since no goroutine of this process responds.
//
//	go test -run '^$' -bench WorkerProcess -benchtime 40000x ./worker/
func BenchmarkWorkerProcess(b *testing.B) {
	for _, role := range []string{"worker", "worker-binary", "raw"} {
		b.Run(role, func(b *testing.B) {
			s := testkit.RunServer(b)
			subject, msgOf := rawSubject, bus.BinaryMsg
			if role != "raw" {
				rnc := testkit.Connect(b, s)
				reg := &registrar{leaving: make(chan struct{}), respond: acceptAll}
				if _, err := rnc.Subscribe(bus.NewSubjects("").All("register"), reg.handle(rnc)); err != nil {
					b.Fatal(err)
				}
				if err := rnc.Flush(); err != nil {
					b.Fatal(err)
				}
				subject = bus.NewSubjects("").Workers.Exec("echo")
			}
			if role == "worker" {
				msgOf = bus.CompactMsg
			}
			child := startBenchChild(b, strings.TrimSuffix(role, "-binary"), s.ClientURL())
			var caller *nats.Conn
			testkit.Labelled("caller", func() { caller = testkit.Connect(b, s) })
			before := child.stats(b)
			benchExec(b, s, caller, subject, benchCallers, msgOf, func(m *nats.Msg) error {
				if m.Header.Get("ce-type") != bus.TypeExecResult {
					return fmt.Errorf("reply %q, %s", m.Header.Get("ce-type"), m.Data)
				}
				return nil
			})
			after := child.stats(b)
			n := float64(b.N + benchWarm) // benchExec's warm calls ran in the child too
			b.ReportMetric(float64(after.CPUNS-before.CPUNS)/1e3/n, "worker-µs/op")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "worker-allocs/op")
			b.ReportMetric(float64(after.Bytes-before.Bytes)/n, "worker-B/op")
			b.ReportMetric(float64(after.GCs-before.GCs)*1e3/n, "worker-gc/kop")
		})
	}
}

// benchWarm is the calls testkit.BenchCalls makes before it measures.
const benchWarm = 100

// rawSubject is the raw responder's subject in a child process.
const rawSubject = "bench.raw.echo"

// The environment of a child process of this test binary (TestMain): the
// role it plays and the NATS server it connects to.
const (
	envBenchChild = "TOOLBUS_WORKER_BENCH_CHILD"
	envBenchURL   = "TOOLBUS_WORKER_BENCH_URL"
	// envBenchProfile, set in the benchmark's environment, is a file the
	// child writes its CPU profile of the measured calls to (the last
	// child's, of the last sub-benchmark run: name one with -bench).
	envBenchProfile = "TOOLBUS_WORKER_BENCH_CPUPROFILE"
	// envBenchTrace is the same for a Go execution trace (runtime/trace).
	envBenchTrace = "TOOLBUS_WORKER_BENCH_TRACE"
)

// childStats is what a child reports of itself.
type childStats struct {
	CPUNS   int64  `json:"cpu_ns"`
	Mallocs uint64 `json:"mallocs"`
	Bytes   uint64 `json:"bytes"`
	GCs     uint32 `json:"gcs"`
}

// benchChild is a child process and its control lines.
type benchChild struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

// startBenchChild runs this test binary as role on url, returns once it
// said it is ready, and ends it when the benchmark does.
func startBenchChild(b *testing.B, role, url string) *benchChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envBenchChild+"="+role, envBenchURL+"="+url)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &benchChild{in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		_ = in.Close() // the child stops at the end of its input
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("bench child %s: %v", role, err)
			}
		case <-time.After(bound):
			_ = cmd.Process.Kill()
			b.Errorf("bench child %s did not stop", role)
			<-done
		}
	})
	if line := c.line(b); line != "ready" {
		b.Fatalf("bench child %s: %q", role, line)
	}
	return c
}

// line reads the child's next line, within bound.
func (c *benchChild) line(b *testing.B) string {
	b.Helper()
	got := make(chan string, 1)
	go func() {
		if c.out.Scan() {
			got <- c.out.Text()
		}
		close(got)
	}()
	select {
	case l, ok := <-got:
		if !ok {
			b.Fatal("bench child: its output ended")
		}
		return l
	case <-time.After(bound):
		b.Fatal("bench child: no answer")
	}
	return ""
}

// stats asks the child for its figures now.
func (c *benchChild) stats(b *testing.B) childStats {
	b.Helper()
	if _, err := io.WriteString(c.in, "stats\n"); err != nil {
		b.Fatal(err)
	}
	var st childStats
	if err := json.Unmarshal([]byte(c.line(b)), &st); err != nil {
		b.Fatal(err)
	}
	return st
}

// runBenchChild is a child process's life: it serves as role on url,
// answers "stats" lines on its input with its figures, and stops when
// its input ends. It returns the process's exit status.
func runBenchChild(role, url string) int {
	fail := func(err error) int { fmt.Fprintf(os.Stderr, "bench child %s: %v\n", role, err); return 1 }
	nc, err := nats.Connect(url)
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	stop := func() error { return nil }
	switch role {
	case "worker":
		w, err := worker.New(nc, worker.Config{ID: "w1"})
		if err != nil {
			return fail(err)
		}
		type in struct {
			Text string `json:"text"`
		}
		if err := worker.Register(w, bus.ToolDef{Name: "echo", Description: "Echo.", ReadOnly: true},
			func(_ context.Context, _ *worker.Call, in in) (string, error) { return in.Text, nil }); err != nil {
			return fail(err)
		}
		if err := w.Start(context.Background()); err != nil {
			return fail(err)
		}
		select {
		case <-w.Registered():
		case <-time.After(bound):
			return fail(fmt.Errorf("not registered"))
		}
		stop = func() error { return w.Stop(context.Background()) }
	case "raw":
		out := bus.Head(bus.TypeExecResult, "toolbus/worker/w1")
		out.SessionID, out.ReplyID, out.ToolCallID = "bench-session-0001", "M3CgXPmzZg1495hoVjoR00", "c1"
		out.Data = []byte(`{"state":"success","output":[{"type":"text","text":"hello"}]}`)
		result := bus.BinaryMsg("", &out)
		if _, err := nc.Subscribe(rawSubject, func(m *nats.Msg) {
			_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: result.Header, Data: result.Data})
		}); err != nil {
			return fail(err)
		}
		if err := nc.Flush(); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown role"))
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	profile, profiling := os.Getenv(envBenchProfile), false
	tracing := os.Getenv(envBenchTrace)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "stats" {
			continue
		}
		if tracing != "" && !trace.IsEnabled() { // as the profile
			f, err := os.Create(tracing)
			if err == nil {
				err = trace.Start(f)
			}
			if err != nil {
				return fail(err)
			}
		} else if trace.IsEnabled() {
			trace.Stop()
			tracing = ""
		}
		if profile != "" && !profiling { // from the first stats to the second
			f, err := os.Create(profile)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				return fail(err)
			}
			profiling = true
		} else if profiling {
			pprof.StopCPUProfile()
			profiling, profile = false, ""
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		line, _ := json.Marshal(childStats{CPUNS: testkit.ProcessCPU().Nanoseconds(), Mallocs: ms.Mallocs, Bytes: ms.TotalAlloc, GCs: ms.NumGC})
		fmt.Println(string(line))
	}
	if err := stop(); err != nil {
		return fail(err)
	}
	return 0
}
