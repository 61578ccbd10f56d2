package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bench"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/natsconn"
)

// The soak's deployment: NATS (a 3-node cluster in this process, or the
// --nats URL), 2 router and 3 toolworker processes, each restarted after it
// is killed. Faults are injected one at a time.

const (
	soakRouters = 2
	soakWorkers = 3
	// soakHeartbeat is the routers' and workers' heartbeat: a killed worker
	// is gone after three missed beats, its calls ended after about six.
	soakHeartbeat = 2 * time.Second
	// soakWorkAckWait is the routers' --work-ack-wait: a durable call whose
	// worker was killed goes to another worker after it.
	soakWorkAckWait = 5 * time.Second
	// soakReady bounds a process's start (its "serving" line).
	soakReady = 60 * time.Second
	// soakStopWait bounds a SIGTERM drain at the end before SIGKILL.
	soakStopWait = 40 * time.Second
)

// soakBinaries are the router and toolworker executables the soak runs.
type soakBinaries struct{ router, worker, from string }

// findSoakBinaries looks for router and toolworker in dir (--bin), next to
// this executable, on $PATH, and else builds them into tmp (cli.Helpers).
func findSoakBinaries(ctx context.Context, dir, tmp string, logf func(string, ...any)) (soakBinaries, error) {
	ps, from, err := cli.Helpers(ctx, dir, tmp, logf, "router", "toolworker")
	if err != nil {
		return soakBinaries{}, err
	}
	return soakBinaries{ps[0], ps[1], from}, nil
}

// soakProc is one router or worker slot; each restart is a new generation
// with its own id (soak-r0-1, soak-w2-3, ...).
type soakProc struct {
	role string // "router" or "worker"
	slot int
	bin  string
	args func(id string) []string
	env  []string
	log  string // output of every generation, appended

	mu  sync.Mutex
	gen int
	id  string
	p   *bench.Process // the current generation
}

// start runs the next generation and waits for its "serving" line.
func (p *soakProc) start(ctx context.Context) error {
	p.mu.Lock()
	p.gen++
	id := fmt.Sprintf("soak-%c%d-%d", p.role[0], p.slot, p.gen)
	p.mu.Unlock()
	logf, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), id, strings.Join(p.args(id), " "))
	proc, err := bench.StartProcess(ctx, bench.ProcessSpec{Path: p.bin, Args: p.args(id), Env: p.env, Log: logf, Bound: soakReady,
		Ready: func(line string) (string, bool) { return "", strings.Contains(line, " serving ") }})
	if err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w (log %s)", id, err, p.log)
	}
	go func() {
		<-proc.Done()
		fmt.Fprintf(logf, "=== %s %s exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), id, proc.State())
		logf.Close()
	}()
	p.mu.Lock()
	p.id, p.p = id, proc
	p.mu.Unlock()
	return nil
}

// current returns the running generation's id and process.
func (p *soakProc) current() (string, *bench.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.p
}

// kill sends SIGKILL to the running generation and waits for it to exit.
func (p *soakProc) kill() (id string, pid int, err error) {
	id, proc := p.current()
	if proc == nil {
		return id, 0, fmt.Errorf("%s is not running", id)
	}
	return id, proc.Pid(), proc.Kill()
}

// stop ends the running generation: SIGTERM (a drain), then SIGKILL after
// soakStopWait.
func (p *soakProc) stop() {
	_, proc := p.current()
	ctx, cancel := context.WithTimeout(context.Background(), soakStopWait)
	defer cancel()
	_ = proc.Stop(ctx)
}

// soakDeploy is the deployment under test.
type soakDeploy struct {
	dir     string
	url     string
	prefix  string
	cluster *embedded.Cluster // nil when joining --nats
	routers []*soakProc
	workers []*soakProc
	effects string // the effect tools' record file
}

// startSoakDeploy starts NATS (unless url is given), the routers and the
// workers.
func startSoakDeploy(ctx context.Context, o *Options, bins soakBinaries, logf func(string, ...any)) (d *soakDeploy, err error) {
	d = &soakDeploy{dir: o.Dir, url: o.NATSURL, prefix: o.Prefix, effects: filepath.Join(o.Dir, "effects.jsonl")}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	if d.url == "" {
		logf("starting a 3-node NATS cluster (JetStream, stores in %s)", filepath.Join(o.Dir, "nats"))
		if d.cluster, err = embedded.StartCluster(embedded.ClusterConfig{Dir: filepath.Join(o.Dir, "nats"), Name: "soak"}); err != nil {
			return nil, err
		}
		d.url = d.cluster.URLs(0)
	}
	hb := soakHeartbeat.String()
	env := childEnv(o, d.cluster == nil)
	for i := range soakRouters {
		d.routers = append(d.routers, &soakProc{role: "router", slot: i, bin: bins.router,
			log: filepath.Join(o.Dir, fmt.Sprintf("router%d.log", i)), env: env,
			args: func(id string) []string {
				return []string{"--nats", d.urlFrom(i), "--prefix", d.prefix, "--replicas", strconv.Itoa(o.Replicas),
					"--heartbeat", hb, "--work-ack-wait", soakWorkAckWait.String(), "--builtin=false", "--id", id}
			}})
	}
	for i := range soakWorkers {
		d.workers = append(d.workers, &soakProc{role: "worker", slot: i, bin: bins.worker,
			log: filepath.Join(o.Dir, fmt.Sprintf("worker%d.log", i)),
			env: append(slices.Clone(env), "TOOLWORKER_EFFECTS_FILE="+d.effects),
			args: func(id string) []string {
				return []string{"--nats", d.urlFrom(i + 1), "--prefix", d.prefix, "--heartbeat", hb, "--id", id}
			}})
	}
	// The first router creates the buckets and streams; the others find them.
	for _, p := range append(append([]*soakProc{}, d.routers...), d.workers...) {
		logf("starting %s %d", p.role, p.slot)
		if err := p.start(ctx); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// childEnv is the environment of the routers and workers: this process's
// without the nats CLI's variables, which on the soak's own (unsecured)
// cluster could only get in the way; joining --nats, the credentials and
// TLS settings of the soak's flags are given to them through those
// variables (not the inbox prefix: routers use their own).
func childEnv(o *Options, joining bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	if joining {
		c := o.Conn
		for _, v := range [][2]string{{natsconn.EnvCreds, c.Creds}, {natsconn.EnvNKey, c.NKey}, {natsconn.EnvUser, c.User},
			{natsconn.EnvPassword, c.Password}, {natsconn.EnvToken, c.Token}, {natsconn.EnvCA, c.CA},
			{natsconn.EnvCert, c.Cert}, {natsconn.EnvKey, c.Key}} {
			if v[1] != "" {
				env = append(env, v[0]+"="+v[1])
			}
		}
	}
	return env
}

// urlFrom lists the cluster's URLs starting at node i, so the processes
// spread over the nodes; a --nats URL is used as given.
func (d *soakDeploy) urlFrom(i int) string {
	if d.cluster == nil {
		return d.url
	}
	return d.cluster.URLs(i % d.cluster.Nodes())
}

// stop ends every process, then the cluster.
func (d *soakDeploy) stop() {
	var wg sync.WaitGroup
	for _, p := range append(append([]*soakProc{}, d.routers...), d.workers...) {
		wg.Go(p.stop)
	}
	wg.Wait()
	if d.cluster != nil {
		_ = d.cluster.Stop(context.Background())
	}
}

// soakFault is one injected fault, as reported.
type soakFault struct {
	AtMS   int64  `json:"at_ms"`   // since the load started
	Kind   string `json:"kind"`    // kill_worker, kill_router, stop_nats_node
	Target string `json:"target"`  // the process id and pid, or the node and why it was chosen
	DownMS int64  `json:"down_ms"` // from the kill to the replacement serving again
	Error  string `json:"error,omitempty"`
}

// faultKinds is the order faults are injected in, round robin.
func (d *soakDeploy) faultKinds() []string {
	if d.cluster != nil {
		return []string{"kill_worker", "kill_router", "stop_nats_node"}
	}
	return []string{"kill_worker", "kill_router"}
}

// inject runs fault number n (kind by n, target by how many of that kind
// came before) and returns it once the victim is back.
func (d *soakDeploy) inject(ctx context.Context, n int, start time.Time, down time.Duration) soakFault {
	kinds := d.faultKinds()
	kind, k := kinds[n%len(kinds)], n/len(kinds)
	f := soakFault{AtMS: time.Since(start).Milliseconds(), Kind: kind}
	t0 := time.Now()
	var err error
	switch kind {
	case "kill_worker", "kill_router":
		procs := d.workers
		if kind == "kill_router" {
			procs = d.routers
		}
		p := procs[k%len(procs)]
		id, pid, kerr := p.kill()
		f.Target = fmt.Sprintf("%s (pid %d, SIGKILL)", id, pid)
		if err = kerr; err == nil {
			sleepCtx(ctx, down)
			err = p.start(context.WithoutCancel(ctx))
		}
	case "stop_nats_node":
		stream := d.faultStreams()[k%len(d.faultStreams())]
		node, lerr := d.cluster.WaitStreamLeader(stream, 30*time.Second)
		if lerr != nil {
			node = k % d.cluster.Nodes()
			f.Target = fmt.Sprintf("n%d (%s has no leader: %v)", node, stream, lerr)
		} else {
			f.Target = fmt.Sprintf("n%d (leader of %s)", node, stream)
		}
		d.cluster.StopNode(node)
		sleepCtx(ctx, 2*down)
		if err = d.cluster.Start(node); err == nil {
			err = d.cluster.WaitReady(60 * time.Second)
		}
	}
	f.DownMS = time.Since(t0).Milliseconds()
	if err != nil {
		f.Error = err.Error()
	}
	return f
}

// faultStreams are the streams whose leader a NATS fault stops, in turn.
func (d *soakDeploy) faultStreams() []string {
	s := bus.NewSubjects(d.prefix)
	return []string{"KV_" + s.Bucket(bus.BucketLedger), "KV_" + s.Bucket(bus.BucketParked), s.Stream(bus.StreamEvents),
		"KV_" + s.Bucket(bus.BucketSessions)}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
