package security

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/embedded"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/mcptest"
	"github.com/toolbus/toolbus/router"
	"github.com/toolbus/toolbus/security"
	"github.com/toolbus/toolbus/store"
	"github.com/toolbus/toolbus/worker"
)

// nscRun interprets the nsc commands security.NSC prints, as nsc would
// run them in an environment with an operator and its system account, into
// account JWTs signed by the operator and user credentials. A command or
// flag it does not know fails the test: the script and this reading of it
// change together.
type nscRun struct {
	t        *testing.T
	operator nkeys.KeyPair
	accounts map[string]*nscAccount
	token    string            // act.jwt
	creds    map[string]string // user: the credentials file's text
}

type nscAccount struct {
	kp     nkeys.KeyPair
	claims *jwt.AccountClaims
}

func (n *nscRun) account(name string) *nscAccount {
	a, ok := n.accounts[name]
	if !ok {
		n.t.Fatalf("nsc: no account %s", name)
	}
	return a
}

// flags parses a command's flags as nsc's (pflag) do: --name value,
// --name=value, and the flags that need no value alone (a bool, or
// --allow-pub-response, whose value is 1 unless given with "="). Any
// other word is an argument, which no command of the script has.
func (n *nscRun) flags(args []string) map[string]string {
	f := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			n.t.Fatalf("nsc: argument %q", args[i])
		}
		if name, v, ok := strings.Cut(name, "="); ok {
			f[name] = v
			continue
		}
		if v, ok := map[string]string{"private": "true", "service": "true", "allow-pub-response": "1"}[name]; ok {
			f[name] = v
			continue
		}
		if i+1 >= len(args) {
			n.t.Fatalf("nsc: --%s without a value", name)
		}
		f[name], i = args[i+1], i+1
	}
	return f
}

// words splits a command line as the shell does for the script's quoting:
// '...' literally, and "$(nsc describe account --name X --field sub | tr
// -d '"')" as the account X's public key.
var describeSub = regexp.MustCompile(`^"\$\(nsc describe account --name (\S+) --field sub \| tr -d '"'\)"`)

func (n *nscRun) words(line string) []string {
	var out []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		switch {
		case describeSub.MatchString(line):
			m := describeSub.FindStringSubmatch(line)
			pub, _ := n.account(m[1]).kp.PublicKey()
			out, line = append(out, pub), line[len(m[0]):]
		case line[0] == '\'':
			var w strings.Builder
			for line != "" && line[0] == '\'' { // 'a'\''b' is a'b
				end := strings.IndexByte(line[1:], '\'')
				w.WriteString(line[1 : end+1])
				line = line[end+2:]
				if rest, ok := strings.CutPrefix(line, `\'`); ok {
					w.WriteByte('\'')
					line = rest
				}
			}
			out = append(out, w.String())
		default:
			w, rest, _ := strings.Cut(line, " ")
			out, line = append(out, w), rest
		}
	}
	return out
}

func (n *nscRun) run(script string) {
	for line := range strings.SplitSeq(strings.ReplaceAll(script, "\\\n", " "), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") || line == "rm -f act.jwt" {
			continue
		}
		w := n.words(line)
		if len(w) < 3 || w[0] != "nsc" {
			n.t.Fatalf("not an nsc command: %s", line)
		}
		n.command(w[1]+" "+w[2], n.flags(w[3:]), line)
	}
}

func (n *nscRun) command(cmd string, f map[string]string, line string) {
	known := map[string][]string{
		"add account":         {"name"},
		"edit account":        {"name", "js-enable"},
		"add export":          {"account", "private", "subject", "service", "response-type", "response-threshold"},
		"generate activation": {"account", "subject", "target-account", "output-file"},
		"add import":          {"account", "token", "local-subject"},
		"add user":            {"account", "name", "allow-pub", "allow-sub", "deny-pub", "deny-sub", "allow-pub-response"},
	}[cmd]
	for k := range f {
		if !slices.Contains(known, k) {
			n.t.Fatalf("nsc %s: flag --%s not interpreted: %s", cmd, k, line)
		}
	}
	switch cmd {
	case "add account":
		kp, err := nkeys.CreateAccount()
		must(n.t, err)
		pub, _ := kp.PublicKey()
		c := jwt.NewAccountClaims(pub)
		c.Name = f["name"]
		n.accounts[f["name"]] = &nscAccount{kp: kp, claims: c}
	case "edit account": // nsc's --js-enable <tier>: disk and memory unlimited, for every replica count (0) or tier R<n>
		a, unlimited := n.account(f["name"]), jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1}
		switch tier, err := strconv.Atoi(f["js-enable"]); {
		case err != nil || tier < 0:
			n.t.Fatalf("nsc: --js-enable %q", f["js-enable"])
		case tier == 0:
			a.claims.Limits.JetStreamLimits = unlimited
		default:
			if a.claims.Limits.JetStreamTieredLimits == nil {
				a.claims.Limits.JetStreamTieredLimits = map[string]jwt.JetStreamLimits{}
			}
			a.claims.Limits.JetStreamTieredLimits[fmt.Sprintf("R%d", tier)] = unlimited
		}
	case "add export":
		e := &jwt.Export{Name: f["subject"], Subject: jwt.Subject(f["subject"]), Type: jwt.Stream, TokenReq: f["private"] == "true"}
		if f["service"] == "true" {
			e.Type = jwt.Service
		}
		if rt := f["response-type"]; rt != "" {
			e.ResponseType = jwt.ResponseType(rt)
		}
		if d := f["response-threshold"]; d != "" {
			var err error
			e.ResponseThreshold, err = time.ParseDuration(d)
			must(n.t, err)
		}
		a := n.account(f["account"])
		a.claims.Exports.Add(e)
	case "generate activation":
		// nsc takes the first private export, in the account JWT's order
		// (sorted by subject), that contains the subject.
		a := n.account(f["account"])
		exports := slices.Clone(a.claims.Exports)
		slices.SortFunc(exports, func(x, y *jwt.Export) int { return strings.Compare(string(x.Subject), string(y.Subject)) })
		sub := jwt.Subject(f["subject"])
		i := slices.IndexFunc(exports, func(e *jwt.Export) bool { return e.TokenReq && sub.IsContainedIn(e.Subject) })
		if i < 0 {
			n.t.Fatalf("nsc: no private export of %s contains %s", f["account"], sub)
		}
		act := jwt.NewActivationClaims(f["target-account"])
		act.Name, act.ImportSubject, act.ImportType = string(sub), sub, exports[i].Type
		var err error
		n.token, err = act.Encode(a.kp)
		must(n.t, err)
	case "add import":
		act, err := jwt.DecodeActivationClaims(n.token)
		must(n.t, err)
		a := n.account(f["account"])
		if pub, _ := a.kp.PublicKey(); act.Subject != pub {
			n.t.Fatalf("nsc: the activation is for %s, not %s", act.Subject, f["account"])
		}
		a.claims.Imports.Add(&jwt.Import{Name: act.Name, Subject: act.ImportSubject, LocalSubject: jwt.RenamingSubject(f["local-subject"]),
			Account: act.Issuer, Token: n.token, Type: act.ImportType})
	case "add user":
		a := n.account(f["account"])
		kp, err := nkeys.CreateUser()
		must(n.t, err)
		pub, _ := kp.PublicKey()
		u := jwt.NewUserClaims(pub)
		u.Name = f["name"]
		split := func(s string) jwt.StringList {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		u.Pub.Allow, u.Sub.Allow, u.Pub.Deny, u.Sub.Deny = split(f["allow-pub"]), split(f["allow-sub"]), split(f["deny-pub"]), split(f["deny-sub"])
		if r := f["allow-pub-response"]; r != "" {
			if r != "1" {
				n.t.Fatalf("nsc: --allow-pub-response %s", r)
			}
			u.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
		}
		token, err := u.Encode(a.kp)
		must(n.t, err)
		seed, _ := kp.Seed()
		creds, err := jwt.FormatUserConfig(token, seed)
		must(n.t, err)
		n.creds[f["name"]] = string(creds)
	default:
		n.t.Fatalf("nsc: command %q not interpreted: %s", cmd, line)
	}
}

// serverConfig writes the operator, its system account and the script's
// accounts as a nats-server configuration in operator mode with a memory
// resolver preloaded with every account JWT, and each user's .creds.
func (n *nscRun) serverConfig(dir string) string {
	opub, _ := n.operator.PublicKey()
	op := jwt.NewOperatorClaims(opub)
	op.Name = "test-operator"
	sys, err := nkeys.CreateAccount()
	must(n.t, err)
	spub, _ := sys.PublicKey()
	op.SystemAccount = spub
	otoken, err := op.Encode(n.operator)
	must(n.t, err)
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	n.accounts["SYS"] = &nscAccount{kp: sys, claims: sc}
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n", otoken, spub)
	for name, a := range n.accounts {
		vr := jwt.CreateValidationResults()
		if a.claims.Validate(vr); len(vr.Issues) > 0 { // nsc refuses a blocking one, and warns of the others
			n.t.Fatalf("account %s: %v", name, vr.Issues[0])
		}
		token, err := a.claims.Encode(n.operator)
		must(n.t, err)
		pub, _ := a.kp.PublicKey()
		fmt.Fprintf(&b, "  %s: %q # %s\n", pub, token, name)
	}
	b.WriteString("}\n")
	for user, creds := range n.creds {
		must(n.t, os.WriteFile(filepath.Join(dir, user+".creds"), []byte(creds), 0o600))
	}
	file := filepath.Join(dir, "operator.conf")
	must(n.t, os.WriteFile(file, []byte(b.String()), 0o600))
	return file
}

// TestNSCDeploymentLive (session 38): the decentralised deployment that
// `toolbus security config --format nsc` prints, run. Its commands are read
// into operator-signed account JWTs and user credentials, nats-server in
// operator mode serves them from a memory resolver, and a router, a worker
// (a plain tool and a durable one) and a session's agent work through it
// as they do with the configuration file's accounts, on one server and on
// a cluster of three with the store's replicas at 3: the calls succeed, no
// role is refused anything it does, and the worker's account answers its
// work consumer's CONSUMER.INFO once, at once (session 37's $JS.API.INFO
// import, TestWorkerFindsItsConsumerAtOnce, under JWT accounts). Then every
// other role, a worker-<name> login among them, does its job and is refused
// what the configuration file refuses it (nscRoles). With nsc on PATH, nsc
// itself runs the script for one server and for the cluster.
func TestNSCDeploymentLive(t *testing.T) {
	type nscCase struct {
		name     string
		replicas int
		nsc      string // the nsc binary that runs the script ("": read by nscRun)
	}
	cases := []nscCase{{"one server", 1, ""}, {"a cluster", 3, ""}}
	if nsc, err := exec.LookPath("nsc"); err == nil {
		cases = append(cases, nscCase{"nsc on PATH", 1, nsc}, nscCase{"nsc on PATH, a cluster", 3, nsc})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { nscDeployment(t, tc.replicas, tc.nsc) })
	}
}

// nscOwn runs script with the nsc binary in an nsc environment of its own
// under dir (an operator and its system account; nothing on the network),
// and writes the memory resolver's configuration and each user's creds.
func nscOwn(t *testing.T, nsc, dir, script string) string {
	home := filepath.Join(dir, "home")
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_DATA_HOME="+filepath.Join(home, "data"), "NSC_HOME=", "NKEYS_PATH=", "PATH="+filepath.Dir(nsc)+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(script string) []byte {
		cmd := exec.Command("bash", "-e", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nsc: %v\n%s", err, out)
		}
		return out
	}
	run("nsc add operator --name toolbus-test --sys\n" + script)
	conf := filepath.Join(dir, "operator.conf")
	run("nsc generate config --mem-resolver --sys-account SYS > " + conf)
	for _, m := range regexp.MustCompile(`nsc add user --account (\S+) --name (\S+)`).FindAllStringSubmatch(script, -1) {
		run(fmt.Sprintf("nsc generate creds --account %s --name %s > %s.creds", m[1], m[2], m[2]))
	}
	return conf
}

func nscDeployment(t *testing.T, replicas int, nsc string) {
	dir := t.TempDir()
	sp := spec // the harness's, with a worker-<name> login and the bridge's question answered by hosts
	sp.Workers, sp.FacadeAnswers = []security.Handler{{Name: "a", Tools: []string{"alpha", "alphajob"}}}, []string{"mcp__q__elicit"}
	users, err := security.Users(sp)
	must(t, err)
	var conf string
	if script := security.NSC("TOOLBUS", users); nsc != "" {
		conf = nscOwn(t, nsc, dir, script)
	} else {
		op, err := nkeys.CreateOperator()
		must(t, err)
		n := &nscRun{t: t, operator: op, accounts: map[string]*nscAccount{}, creds: map[string]string{}}
		n.run(script)
		conf = n.serverConfig(dir)
	}
	// The roles log in to nodes of their own on a cluster (d.srv).
	d := &deployment{t: t, dir: dir, users: users, creds: true}
	var node func(int) *server.Server
	if replicas == 1 {
		srv, err := embedded.Start(embedded.Config{MaxStore: embedded.Roomy, ConfigFile: conf, StoreDir: filepath.Join(dir, "js")})
		must(t, err)
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		node = func(int) *server.Server { return srv }
	} else {
		c, err := embedded.StartCluster(testkit.Within(t, embedded.ClusterReady), embedded.ClusterConfig{MaxStore: embedded.Roomy, Dir: filepath.Join(dir, "js"), ConfigFile: conf})
		must(t, err)
		testkit.Stop(t, c.Stop)
		node = c.Node
	}
	bindings := filepath.Join(dir, security.UsersFile)
	must(t, os.WriteFile(bindings, []byte(security.JSON(users)), 0o600))
	ids, err := security.LoadBindings(bindings)
	must(t, err)
	d.srv = node(0)
	rl := d.conn("router")
	r, err := router.New(rl.nc, router.Config{Logger: slog.New(slog.DiscardHandler), Store: store.Config{Heartbeat: testHeartbeat, Replicas: replicas}, Identities: ids})
	must(t, err)
	must(t, r.Start(t.Context()))
	testkit.Stop(t, r.Stop)
	d.srv = node(1)
	wl := d.startWorker()
	d.srv = node(2)
	al := d.conn("session-s1")
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	reply, err := al.client().Call(ctx, "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}, {ID: "c2", Name: "batchjob"}, {ID: "c3", Name: "bigread"}}}, client.WithReplyID("r1"))
	if err != nil || len(reply.Results) != 3 {
		t.Fatalf("greet, batchjob and bigread within %v of the registration: %+v %v", bound, reply, err)
	}
	i := slices.IndexFunc(reply.Results[2].Output, func(b bus.Block) bool { return b.URL != "" })
	if i < 0 {
		t.Fatalf("a 2 MiB output was not stored: %.300v", reply.Results[2])
	}
	if big, err := al.client().Outputs().FetchBytes(ctx, reply.Results[2].Output[i].URL); err != nil || len(big) != 2<<20 {
		t.Fatalf("bigread's output stored by the worker's account and fetched by the agent: %d bytes, %v", len(big), err)
	}
	for _, res := range reply.Results {
		if res.State != bus.StateSuccess {
			t.Fatalf("%s: %+v", res.Name, res)
		}
	}
	consumerInfoOnce(t, wl.nc, "batchjob")
	// The main account's P.cancel.> reaches the runner's account (a stream).
	sub, err := wl.nc.SubscribeSync("toolbus.cancel.>")
	must(t, err)
	must(t, wl.nc.Flush())
	must(t, rl.nc.Publish("toolbus.cancel.s1.probe", nil))
	if _, err := sub.NextMsg(bound); err != nil {
		t.Fatalf("the worker's account got no cancel: %v", err)
	}
	for _, l := range []*login{rl, wl, al} {
		l.noViolations()
	}
	wl.denyPublish("$JS.API.INFO")
	al.denyPublish("toolbus.call.s2")
	nscRoles(t, d, node, al, wl)
}

// nscRoles: every other role does its job under the JWT accounts, each
// logged in on a node of its own, in order (the facade calls the bridge's
// tool; the approver and the operator each confirm a call the agent al
// parks, the handler answers one) with no permissions violation, the worker login wl's and al's
// included. Then each is refused what the configuration file's accounts
// refuse it (the tests that check those named), each refusal on its own.
func nscRoles(t *testing.T, d *deployment, node func(int) *server.Server, al, wl *login) {
	ac := al.client()
	ev, err := ac.Watch(testCtx(t), "s1")
	must(t, err)
	defer ev.Stop(t.Context())
	yes := true
	park := func(replyID string) {
		t.Helper()
		reply, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "deploy"}}}, client.WithReplyID(replyID))
		if err != nil || len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindConfirm {
			t.Fatalf("deploy did not park for a confirmation: %+v %v", reply, err)
		}
	}
	confirmed := func(replyID string) { // the batch ends with its call run
		t.Helper()
		var bd bus.BatchDone
		for e := waitType(t, ev, bus.TypeBatchDone); ; e = waitType(t, ev, bus.TypeBatchDone) {
			if e.ReplyID == replyID {
				must(t, e.DataAs(&bd))
				break
			}
		}
		if len(bd.Results) != 1 || bd.Results[0].State != bus.StateSuccess {
			t.Fatalf("%s after the confirmation: %+v", replyID, bd)
		}
	}
	var parked struct {
		Parked []bus.ParkedCall `json:"parked"`
	}
	rows := []struct {
		user     string
		job      func(*login)
		pub, sub []string // refused as by the configuration file; "subject queue" subscribes in a queue group
	}{
		{"worker-a", func(l *login) { // TestAttackWorkerAgainstWorker
			w, err := worker.New(l.nc, worker.Config{Heartbeat: testHeartbeat})
			must(t, err)
			def := bus.ToolDef{Name: "alpha", Description: "Worker a's.", ReadOnly: true, InputSchema: json.RawMessage(`{"type":"object"}`)}
			job := bus.ToolDef{Name: "alphajob", Description: "Worker a's durable job.", Durable: true, Permission: bus.PermissionAllow, InputSchema: def.InputSchema}
			for _, d := range []bus.ToolDef{def, job} {
				must(t, w.Handle(d, func(context.Context, *worker.Call) (*bus.ExecResult, error) {
					return &bus.ExecResult{Output: bus.Text("a ran")}, nil
				}))
			}
			must(t, w.Start(t.Context()))
			testkit.Stop(t, func(ctx context.Context) error { return w.Drain(ctx) })
			testkit.Recv(t, w.Registered(), bound, "worker a's registration")
			rep, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "alpha"}, {ID: "c2", Name: "alphajob"}}})
			if err != nil || len(rep.Results) != 2 || rep.Results[0].State != bus.StateSuccess || rep.Results[1].State != bus.StateSuccess {
				t.Fatalf("alpha and alphajob: %+v %v", rep, err)
			}
			consumerInfoOnce(t, l.nc, "alphajob")
			// TestAttackWorkerBeatsForAnother: the worker login's account (an account's public key,
			// as nats-server names JWT accounts in Nats-Request-Info) may not leave for worker a's id.
			ev, err := bus.NewEvent(bus.TypeRegister, "toolbus/worker/"+w.ID(), bus.Register{Worker: w.ID(), Tools: []bus.ToolDef{def}, Leaving: true})
			must(t, err)
			m, err := bus.SendRequest(testCtx(t), wl.nc, bus.NewSubjects("").Workers.Register("alpha"), ev)
			must(t, err)
			var e bus.Error
			if got, _ := bus.Decode(m); got == nil || got.Type != bus.TypeError || got.DataAs(&e) != nil || e.Code != bus.CodeDenied {
				t.Fatalf("the worker login's leave for worker a: %s, want denied", m.Data)
			}
		}, []string{"toolbus.register.greet", "toolbus.resources.r"}, []string{"toolbus.exec.alpha", "toolbus.exec.alpha spy", "toolbus.resources.>"}}, // its execs outside its queue group; no resources
		{security.RoleBridge, func(l *login) { // TestWorkerFindsItsConsumerAtOnce, TestOnlyRoutersPublishEvents
			// Two servers in one bridge, one connection: the operator's discovery finds both
			// (TestBridgeDiscoveryOfTwoServers).
			runBridge(t, l, bridge.Server{Name: "q", Transport: bridge.TransportHTTP, URL: mcptest.AskServer(t)}, resourcesServer(t))
		}, []string{"$JS.API.INFO", "toolbus.events.s1"}, nil},
		{security.RoleFacade, func(*login) { // TestFacadeIdentity; the bridge's tool, its question relayed on P.ask and answered by alice's host
			url, fl := d.mcpFacade(t)
			host := &hostNames{asked: make(chan string, 4)}
			c := mcpConnect(t, url+"/mcp/s1", hostToken, host)
			waitListed(t, c, "mcp__q__ask")
			if r := mcpCall(t, c, "greet"); r.IsError || mcpText(r) != "hello" {
				t.Fatalf("greet: %+v", r)
			}
			if r := mcpCall(t, c, "mcp__q__ask"); r.IsError || mcpText(r) != `accept {"name":"alice"}` {
				t.Fatalf("the bridged question answered by alice's host: %+v", r)
			}
			testkit.Recv(t, host.asked, bound, "alice's question")
			readResources(t, c) // session 39: the bridge's resources under JWT accounts
			fl.noViolations()
		}, []string{"toolbus.exec.greet"}, []string{"toolbus.confirm.>", "toolbus.resources.>"}},
		{security.RoleApprover, func(l *login) { // TestApproverAndOperatorConfined, TestApproverNarrow
			park("r-approver")
			req := readHandoff(t, l, "toolbus.confirm.deploy")
			must(t, l.client().Admin(testCtx(t), "parked.list", "s1", nil, &parked))
			if len(parked.Parked) != 1 || parked.Parked[0].ReplyID != "r-approver" {
				t.Fatalf("parked.list: %+v", parked.Parked)
			}
			must(t, l.client().Parked().Confirm(testCtx(t), "deploy", "s1", "r-approver", "c1", bus.Answer{Confirmed: &yes, InputDigest: digestOf(t, req)}))
			confirmed("r-approver")
		}, []string{"toolbus.answer.deploy", "toolbus.resources.r"}, []string{"toolbus.events.>"}},
		{security.RoleOperator, func(l *login) { // TestApproverAndOperatorConfined, TestAttackPresence: toolbus status, parked, confirm
			var st json.RawMessage
			must(t, l.client().Admin(testCtx(t), "status", "", struct{}{}, &st))
			// status's discovery: the runners answer on the operator's inbox as responses (--allow-pub-response).
			inbox := l.nc.NewInbox()
			sub, err := l.nc.SubscribeSync(inbox)
			must(t, err)
			must(t, l.nc.PublishRequest("$SRV.INFO.toolbus-worker", inbox, nil))
			for found := map[string]bool{}; !found["alpha"] || !found["greet"] || !found["mcp__q__ask"] || !found["mcp__r__echo"]; {
				m, err := sub.NextMsg(bound)
				if err != nil {
					t.Fatalf("the workers' discovery answers: %v (found %v)", err, found)
				}
				var in micro.Info
				must(t, json.Unmarshal(m.Data, &in))
				for _, ep := range in.Endpoints {
					found[ep.Name] = true
				}
			}
			park("r-operator")
			must(t, l.client().Admin(testCtx(t), "parked.list", "s1", nil, &parked))
			if len(parked.Parked) != 1 || parked.Parked[0].ReplyID != "r-operator" {
				t.Fatalf("parked.list: %+v", parked.Parked)
			}
			must(t, l.client().Parked().Confirm(testCtx(t), "deploy", "s1", "r-operator", "c1", bus.Answer{Confirmed: &yes, InputDigest: parked.Parked[0].InputDigest}))
			confirmed("r-operator")
		}, []string{"toolbus.exec.deploy", "$JS.API.STREAM.PURGE.KV_toolbus_routers"}, nil},
		{"handler-picker", func(l *login) { // TestHandlerConfined
			reply, err := ac.Call(testCtx(t), "s1", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "pick"}}}, client.WithReplyID("r-handler"))
			if err != nil || len(reply.Parked) != 1 || reply.Parked[0].Kind != bus.KindExternal {
				t.Fatalf("pick did not park: %+v %v", reply, err)
			}
			req := readHandoff(t, l, "toolbus.external.pick")
			must(t, l.client().Parked().Answer(testCtx(t), "pick", req.SessionID, req.ReplyID, req.ToolCallID, bus.Answer{State: bus.StateSuccess, Output: bus.Text("a.txt")}))
			confirmed("r-handler")
		}, []string{"toolbus.answer.deploy", "toolbus.resources.r"}, []string{"toolbus.external.other"}},
		{security.RoleAgent, func(l *login) { // TestAgentOfEverySession, TestSharedAgentLockedOut (its deny lists)
			if rep, err := l.client().Call(testCtx(t), "s9", bus.Batch{Calls: []bus.Call{{ID: "c1", Name: "greet"}}}); err != nil || len(rep.Results) != 1 || rep.Results[0].State != bus.StateSuccess {
				t.Fatalf("greet in s9: %+v %v", rep, err)
			}
		}, []string{"toolbus.exec.greet", "toolbus.call.s1", "toolbus.resources.r"}, []string{"toolbus.events.s1", "toolbus.resources.>"}},
	}
	logins := make([]*login, len(rows))
	for i, r := range rows {
		d.srv = node(i % 3)
		logins[i] = d.conn(r.user)
		r.job(logins[i])
	}
	for _, l := range logins {
		l.noViolations()
	}
	wl.noViolationsBut("$JS.API.INFO")
	al.noViolationsBut("toolbus.call.s2")
	for i, r := range rows {
		l := logins[i]
		for _, s := range slices.Concat(r.pub, r.sub) {
			l.mu.Lock()
			l.errs = nil // each refusal its own
			l.mu.Unlock()
			subj, queue, _ := strings.Cut(s, " ")
			switch {
			case slices.Contains(r.pub, s):
				l.denyPublish(s)
			case queue == "":
				l.denySubscribe(s)
			default:
				sub, err := l.nc.QueueSubscribeSync(subj, queue)
				must(t, err)
				l.waitViolation("Subscription", subj)
				_ = sub.Unsubscribe()
				if l.mu.Lock(); !strings.Contains(fmt.Sprint(l.errs), fmt.Sprintf("using queue %q", queue)) {
					t.Errorf("%s: %v, want the queue group %s refused", l.name, l.errs, queue)
				}
				l.mu.Unlock()
			}
		}
	}
}

// askBridge runs a bridge logged in as l serving mcptest.AskServer as the
// MCP server q (its tool mcp__q__ask asks the host's user a question).
func askBridge(t *testing.T, l *login) {
	runBridge(t, l, bridge.Server{Name: "q", Transport: bridge.TransportHTTP, URL: mcptest.AskServer(t)})
}

// runBridge runs a bridge logged in as l serving servers.
func runBridge(t *testing.T, l *login, servers ...bridge.Server) {
	b, err := bridge.New(l.nc, &bridge.File{Servers: servers},
		bridge.Config{Heartbeat: testHeartbeat, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	must(t, b.Start(t.Context()))
	t.Cleanup(func() { _ = b.Stop(testkit.StopContext(t)) })
}

// waitListed waits until the MCP client c lists the tool name.
func waitListed(t *testing.T, c *mcpclient.Client, name string) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		list, err := c.ListTools(testCtx(t), mcp.ListToolsRequest{})
		must(t, err)
		if slices.ContainsFunc(list.Tools, func(tl mcp.Tool) bool { return tl.Name == name }) {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%s not listed within %s", name, bound)
		}
	}
}
