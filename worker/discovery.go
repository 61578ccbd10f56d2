package worker

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// discovery answers NATS micro discovery for the worker (PING, INFO and
// STATS on $SRV.<verb>[.<name>[.<id>]]) in the micro library's formats,
// listing each tool with an endpoint now: the endpoints are the worker's
// own subscriptions, not a micro service's (docs/worker.md, "the hand-off").
type discovery struct {
	id          micro.ServiceIdentity
	description string
	subj        bus.Subjects
	started     time.Time
	endpoints   func() []*tool // the tools with an endpoint now
	subs        []*nats.Subscription
}

// serviceName is the micro service name of every worker.
const serviceName = "toolbus-worker"

func newDiscovery(subj bus.Subjects, workerID, version string) *discovery {
	return &discovery{subj: subj, description: "toolbus worker " + workerID, id: micro.ServiceIdentity{
		Name: serviceName, ID: nuid.Next(), Version: version,
		Metadata: map[string]string{"worker": workerID, "prefix": subj.Prefix},
	}}
}

// start subscribes each verb for every service, this name and this instance.
func (d *discovery) start(nc *nats.Conn, endpoints func() []*tool) error {
	d.endpoints, d.started = endpoints, time.Now().UTC()
	for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
		for _, who := range [][2]string{{"", ""}, {d.id.Name, ""}, {d.id.Name, d.id.ID}} {
			subject, err := micro.ControlSubject(verb, who[0], who[1])
			if err != nil {
				return fmt.Errorf("worker: discovery: %w", err)
			}
			sub, err := nc.Subscribe(subject, func(m *nats.Msg) { d.answer(verb, m) })
			if err != nil {
				return fmt.Errorf("worker: discovery: %w", err)
			}
			d.subs = append(d.subs, sub)
		}
	}
	return nil
}

// answer answers one discovery request (its data is ignored, as micro does).
func (d *discovery) answer(verb micro.Verb, m *nats.Msg) {
	var v any
	switch verb {
	case micro.PingVerb:
		v = micro.Ping{ServiceIdentity: d.id, Type: micro.PingResponseType}
	case micro.InfoVerb:
		v = d.info()
	default:
		v = d.stats()
	}
	data, err := json.Marshal(v)
	if err == nil {
		_ = m.Respond(data)
	}
}

func (d *discovery) info() micro.Info {
	info := micro.Info{ServiceIdentity: d.id, Type: micro.InfoResponseType, Description: d.description, Endpoints: []micro.EndpointInfo{}}
	for _, t := range d.endpoints() {
		info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: t.def.Name, Subject: d.subj.Workers.Exec(t.def.Name),
			QueueGroup: d.subj.Workers.ExecQueue(t.def.Name),
			Metadata:   map[string]string{"description": t.def.Description, "read_only": fmt.Sprint(t.def.ReadOnly)}})
	}
	return info
}

// stats are the endpoints' counts: ProcessingTime is the time calls ran
// (a micro service's would time only its callback).
func (d *discovery) stats() micro.Stats {
	st := micro.Stats{ServiceIdentity: d.id, Type: micro.StatsResponseType, Started: d.started, Endpoints: []*micro.EndpointStats{}}
	for _, t := range d.endpoints() {
		calls, errs, nanos := t.calls.Load(), t.errors.Load(), t.nanos.Load()
		ep := &micro.EndpointStats{Name: t.def.Name, Subject: d.subj.Workers.Exec(t.def.Name), QueueGroup: d.subj.Workers.ExecQueue(t.def.Name),
			NumRequests: int(t.requests.Load()), NumErrors: int(errs), ProcessingTime: time.Duration(nanos)}
		data := toolStats{Calls: calls, Errors: errs}
		if calls > 0 {
			ep.AverageProcessingTime = time.Duration(nanos / calls)
			data.AverageRunMS = float64(nanos) / float64(calls) / 1e6
		}
		ep.Data, _ = json.Marshal(data)
		st.Endpoints = append(st.Endpoints, ep)
	}
	return st
}

// stop ends the discovery: the worker is no longer listed.
func (d *discovery) stop() {
	for _, sub := range d.subs {
		_ = sub.Unsubscribe()
	}
}
