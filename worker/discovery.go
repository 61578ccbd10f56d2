package worker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// discovery answers NATS micro discovery (PING, INFO and STATS on
// $SRV.<verb>[.<name>[.<id>]]) in the micro library's formats for every
// worker on one connection, listing each tool with an endpoint now: the
// endpoints are the workers' own subscriptions, not a micro service's
// (docs/worker.md, "the hand-off"). One per connection, not per worker: a
// request the connection receives twice, from two workers' subscriptions,
// is one the server lets it answer not at all under allow_responses (a
// bridge of two MCP servers was invisible to the operator,
// TestTwoWorkersOneConnection).
type discovery struct {
	id      string
	started time.Time
	subs    []*nats.Subscription
	members []*member // in join order; under discoveries' lock
}

// member is one worker of a connection's discovery.
type member struct {
	worker, version string
	subj            bus.Subjects
	endpoints       func() []*tool // the tools with an endpoint now
}

// discoveries are the connections' discoveries.
var discoveries = struct {
	sync.Mutex
	by map[*nats.Conn]*discovery
}{by: map[*nats.Conn]*discovery{}}

// serviceName is the micro service name of every worker.
const serviceName = "toolbus-worker"

// join adds m to nc's discovery, starting it (each verb for every service,
// this name and this instance) if m is the connection's first worker.
func join(nc *nats.Conn, m *member) error {
	discoveries.Lock()
	defer discoveries.Unlock()
	if d := discoveries.by[nc]; d != nil {
		d.members = append(d.members, m)
		return nil
	}
	d := &discovery{id: nuid.Next(), started: time.Now().UTC(), members: []*member{m}}
	for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
		for _, who := range [][2]string{{"", ""}, {serviceName, ""}, {serviceName, d.id}} {
			subject, err := micro.ControlSubject(verb, who[0], who[1])
			if err == nil {
				var sub *nats.Subscription
				sub, err = nc.Subscribe(subject, func(msg *nats.Msg) { d.answer(verb, msg) })
				d.subs = append(d.subs, sub)
			}
			if err != nil {
				d.unsubscribe()
				return fmt.Errorf("worker: discovery: %w", err)
			}
		}
	}
	discoveries.by[nc] = d
	return nil
}

// leave takes m out of nc's discovery, which ends with its last worker:
// the connection is no longer listed.
func leave(nc *nats.Conn, m *member) {
	discoveries.Lock()
	defer discoveries.Unlock()
	d := discoveries.by[nc]
	if d == nil {
		return
	}
	d.members = slices.DeleteFunc(d.members, func(o *member) bool { return o == m })
	if len(d.members) == 0 {
		d.unsubscribe()
		delete(discoveries.by, nc)
	}
}

func (d *discovery) unsubscribe() {
	for _, sub := range d.subs {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}
}

// answer answers one discovery request (its data is ignored, as micro does).
func (d *discovery) answer(verb micro.Verb, m *nats.Msg) {
	discoveries.Lock()
	members := slices.Clone(d.members)
	discoveries.Unlock()
	if len(members) == 0 {
		return // the last worker left
	}
	var ids, prefixes []string
	for _, m := range members {
		ids = append(ids, m.worker)
		if !slices.Contains(prefixes, m.subj.Prefix) {
			prefixes = append(prefixes, m.subj.Prefix)
		}
	}
	id := micro.ServiceIdentity{Name: serviceName, ID: d.id, Version: members[0].version,
		Metadata: map[string]string{"worker": strings.Join(ids, ","), "prefix": strings.Join(prefixes, ",")}}
	var v any
	switch verb {
	case micro.PingVerb:
		v = micro.Ping{ServiceIdentity: id, Type: micro.PingResponseType}
	case micro.InfoVerb:
		v = info(id, members)
	default:
		v = stats(id, d.started, members)
	}
	data, err := json.Marshal(v)
	if err == nil {
		_ = m.Respond(data)
	}
}

func info(id micro.ServiceIdentity, members []*member) micro.Info {
	info := micro.Info{ServiceIdentity: id, Type: micro.InfoResponseType, Description: "toolbus worker " + id.Metadata["worker"], Endpoints: []micro.EndpointInfo{}}
	for _, m := range members {
		for _, t := range m.endpoints() {
			info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: t.def.Name, Subject: m.subj.Workers.Exec(t.def.Name),
				QueueGroup: m.subj.Workers.ExecQueue(t.def.Name),
				Metadata:   map[string]string{"description": t.def.Description, "read_only": fmt.Sprint(t.def.ReadOnly)}})
		}
	}
	return info
}

// stats are the endpoints' counts: ProcessingTime is the time calls ran
// (a micro service's would time only its callback).
func stats(id micro.ServiceIdentity, started time.Time, members []*member) micro.Stats {
	st := micro.Stats{ServiceIdentity: id, Type: micro.StatsResponseType, Started: started, Endpoints: []*micro.EndpointStats{}}
	for _, m := range members {
		for _, t := range m.endpoints() {
			calls, errs, nanos := t.calls.Load(), t.errors.Load(), t.nanos.Load()
			ep := &micro.EndpointStats{Name: t.def.Name, Subject: m.subj.Workers.Exec(t.def.Name), QueueGroup: m.subj.Workers.ExecQueue(t.def.Name),
				NumRequests: int(t.requests.Load()), NumErrors: int(errs), ProcessingTime: time.Duration(nanos)}
			data := toolStats{Calls: calls, Errors: errs}
			if calls > 0 {
				ep.AverageProcessingTime = time.Duration(nanos / calls)
				data.AverageRunMS = float64(nanos) / float64(calls) / 1e6
			}
			ep.Data, _ = json.Marshal(data)
			st.Endpoints = append(st.Endpoints, ep)
		}
	}
	return st
}
