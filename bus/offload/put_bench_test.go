package offload_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
)

// serversEnv makes the test binary a server process for BenchmarkPut: "node"
// or "cluster" (3 nodes), its store under the directory in serversDirEnv.
const (
	serversEnv    = "OFFLOAD_BENCH_SERVERS"
	serversDirEnv = "OFFLOAD_BENCH_DIR"
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(serversEnv); kind != "" {
		os.Exit(serveForBench(kind, os.Getenv(serversDirEnv)))
	}
	os.Exit(m.Run())
}

// beatSubject carries the stand-in heartbeats: a worker's beat is a small
// request on the connection that stores the output (docs/operations.md
// "Large outputs").
const (
	beatSubject  = "bench.beat"
	statsSubject = "bench.beat.stats"
	beatEvery    = 20 * time.Millisecond
)

// beatStats is what the server process saw of the beats since the last ask.
type beatStats struct {
	Beats  int           `json:"beats"`
	MaxGap time.Duration `json:"max_gap"` // between two arrivals
	MaxLag time.Duration `json:"max_lag"` // from send to arrival (one machine's clock)
}

// serveForBench runs the servers and the beats' receiver (on the last
// node) until stdin closes; it prints the client URLs first.
func serveForBench(kind, dir string) int {
	var urls []string
	var stop func()
	switch kind {
	case "node":
		s, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, StoreDir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		urls, stop = []string{s.ClientURL()}, func() { s.Shutdown(); s.WaitForShutdown() }
	default:
		ctx, cancel := context.WithTimeout(context.Background(), embedded.ClusterReady)
		c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{MaxStore: embedded.Roomy, Dir: dir})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i := range c.Nodes() {
			urls = append(urls, c.URL(i))
		}
		stop = func() { _ = c.Stop(context.Background()) }
	}
	defer stop()
	nc, err := nats.Connect(urls[len(urls)-1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	var mu sync.Mutex
	var st beatStats
	var last time.Time
	_, _ = nc.Subscribe(beatSubject, func(m *nats.Msg) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if len(m.Data) == 8 {
			st.MaxLag = max(st.MaxLag, now.Sub(time.Unix(0, int64(binary.BigEndian.Uint64(m.Data)))))
		}
		if !last.IsZero() {
			st.MaxGap = max(st.MaxGap, now.Sub(last))
		}
		st.Beats++
		last = now
	})
	_, _ = nc.Subscribe(statsSubject, func(m *nats.Msg) {
		mu.Lock()
		raw, _ := json.Marshal(st)
		st, last = beatStats{}, time.Time{}
		mu.Unlock()
		_ = m.Respond(raw)
	})
	_ = nc.Flush()
	fmt.Println(strings.Join(urls, ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the bench ends
	return 0
}

// startServers starts the server process and returns its client URLs
// and its process id.
func startServers(b *testing.B, kind string) ([]string, int) {
	b.Helper()
	dir, err := os.MkdirTemp("", "offload-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serversEnv+"="+kind, serversDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("server process: %v", err)
	}
	return strings.Split(strings.TrimSpace(line), ","), cmd.Process.Pid
}

// childCPU is process pid's user and system CPU so far, from
// /proc/<pid>/stat in clock ticks of 10 ms (0 where there is none).
func childCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest) // from the state, the 3rd field: utime is the 14th, stime the 15th
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// BenchmarkPut stores one text output of 1, 20 and 64 MiB per op, as a
// worker does (Offloader.Fit), on one node and on a 3-node cluster with
// replicas 3 (the servers in a child process, so the CPU reported is the
// writer's alone), while the writer's connection sends a beat every 20 ms
// that a connection on another node receives. It reports the worst gap
// between two beats' arrivals and the worst beat's lag (what a router's
// wait for a heartbeat may grow by), the writer process's CPU per op and
// the servers' (their process's, in 10 ms ticks), for each window in
// benchWindows.
//
//	go test -run '^$' -bench BenchmarkPut -benchtime 3x ./bus/offload/
func BenchmarkPut(b *testing.B) {
	for _, kind := range []string{"node", "cluster"} {
		b.Run(kind, func(b *testing.B) {
			urls, pid := startServers(b, kind)
			nc := testkit.ConnectURL(b, urls[0])
			js := testkit.JetStream(b, nc)
			replicas := len(urls)
			if _, err := js.CreateObjectStore(b.Context(), jetstream.ObjectStoreConfig{Bucket: "bench_outputs", Storage: jetstream.FileStorage, Replicas: replicas}); err != nil {
				b.Fatal(err)
			}
			for _, mib := range []int{1, 20, 64} {
				size := min(mib<<20, offload.DefaultMaxOutput-4096) // 64 MiB: the ceiling, less the JSON's quotes
				for _, w := range benchWindows() {
					b.Run(fmt.Sprintf("%dMiB/window=%dKiB", mib, w>>10), func(b *testing.B) { benchPut(b, nc, js, urls, pid, size, w) })
				}
			}
		})
	}
}

// benchWindows are the windows BenchmarkPut compares: the two chunks of
// sessions 33-41 (one put alone), PutWindow and larger ones; OFFLOAD_BENCH_WINDOWS
// (KiB, comma-separated) chooses others.
func benchWindows() []int {
	ws := []int{2 * offload.ChunkSize, offload.PutWindow, 4 << 20, 16 << 20}
	if env := os.Getenv("OFFLOAD_BENCH_WINDOWS"); env != "" {
		ws = ws[:0]
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				panic("OFFLOAD_BENCH_WINDOWS: " + f)
			}
			ws = append(ws, n<<10)
		}
	}
	return ws
}

func benchPut(b *testing.B, nc *nats.Conn, js jetstream.JetStream, urls []string, pid, size, window int) {
	o, err := offload.New(nc, "bench_outputs", offload.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	offload.SetPutWindow(o, window)
	probe := testkit.ConnectURL(b, urls[len(urls)-1])
	out := bus.Text(strings.Repeat("0123456789abcdef", size/16))
	var worst beatStats
	var cpu, servers time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if _, err := probe.Request(statsSubject, nil, testkit.SetupWait); err != nil { // a fresh count
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		beats := make(chan struct{})
		go func() {
			defer close(beats)
			t := time.NewTicker(beatEvery)
			defer t.Stop()
			for {
				var now [8]byte
				binary.BigEndian.PutUint64(now[:], uint64(time.Now().UnixNano()))
				_ = nc.Publish(beatSubject, now[:])
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
		cpu0, servers0 := testkit.ProcessCPU(), childCPU(pid)
		b.StartTimer()
		res, err := o.Fit(b.Context(), fmt.Sprintf("s.r.c%d", i), out, 0, false)
		b.StopTimer()
		cpu += testkit.ProcessCPU() - cpu0
		servers += childCPU(pid) - servers0
		cancel()
		<-beats
		if err != nil || len(res) != 2 {
			b.Fatalf("put: %v (%d blocks)", err, len(res))
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		m, err := probe.Request(statsSubject, nil, testkit.SetupWait)
		if err != nil {
			b.Fatal(err)
		}
		var st beatStats
		if err := json.Unmarshal(m.Data, &st); err != nil {
			b.Fatal(err)
		}
		worst.MaxGap, worst.MaxLag = max(worst.MaxGap, st.MaxGap), max(worst.MaxLag, st.MaxLag)
		if err := js.DeleteStream(b.Context(), "OBJ_bench_outputs"); err == nil { // the disk back
			_, err = js.CreateObjectStore(b.Context(), jetstream.ObjectStoreConfig{Bucket: "bench_outputs", Storage: jetstream.FileStorage, Replicas: len(urls)})
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(worst.MaxGap)/1e6, "worst-gap-ms")
	b.ReportMetric(float64(worst.MaxLag)/1e6, "worst-lag-ms")
	b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(servers)/1e6/float64(b.N), "servers-cpu-ms/op")
}
