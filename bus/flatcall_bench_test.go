package bus

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// The four decodes of one read-only call in the in-process bench (the
// router's batch and exec result, the worker's exec, the client's reply),
// as they are on the wire; BenchmarkReadOnlyDecodes runs them in turn, the
// measure of the flat parser's and the binary reads' share of a call.
var (
	callBatchMsg = &nats.Msg{Header: nats.Header{HeaderContentType: {ContentTypeEvent}}, Data: []byte(`{"specversion":"1.0","id":"8ZLWdUU52XsG1PwekzwD3E","source":"bench/agent","type":"io.toolbus.call.batch","datacontenttype":"application/json","time":"2026-12-06T13:04:41.430Z","sessionid":"bench-0","data":{"calls":[{"id":"c1","name":"echo","input":{"text":"hello"}}],"sessionrev":1}}`)}
	callExecMsg  = &nats.Msg{Header: nats.Header{"ce-expirytime": {"2026-12-06T13:09:41.430244095Z"}, "ce-id": {"8ZLWdUU52XsG1PwekzwCnE"},
		"ce-replyid": {"8ZLWdUU52XsG1PwekzwCjE"}, "ce-sessionid": {"bench-0"}, "ce-source": {"toolbus/router/CsimRsZRXxU2FIyuUV1VMQ"},
		"ce-specversion": {"1.0"}, "ce-toolcallid": {"c1"}, "ce-type": {"io.toolbus.exec"}},
		Data: []byte(`{"call":{"id":"c1","name":"echo","input":{"text":"hello"}},"user":null,"context":null,"attempt":1,"progress_reply":true}`)}
	callResultMsg = &nats.Msg{Header: nats.Header{"ce-id": {"8ZLWdUU52XsG1PwekzwCrE"}, "ce-source": {"toolbus/worker/CsimRsZRXxU2FIyuUV1Xpi"},
		"ce-specversion": {"1.0"}, "ce-type": {"io.toolbus.exec.result"}}, Data: []byte(`{"state":"success","output":[{"type":"text","text":"hello"}]}`)}
	callReplyMsg = &nats.Msg{Header: nats.Header{HeaderContentType: {ContentTypeEvent}}, Data: []byte(`{"specversion":"1.0","id":"8ZLWdUU52XsG1PwekzwCzE","source":"toolbus/router/CsimRsZRXxU2FIyuUV1VMQ","type":"io.toolbus.call.reply","datacontenttype":"application/json","time":"2026-12-06T13:04:41.430Z","sessionid":"bench-0","replyid":"8ZLWdUU52XsG1PwekzwCjE","data":{"results":[{"id":"c1","name":"echo","state":"success","output":[{"type":"text","text":"hello"}]}],"parked":[],"sessionrev":1}}`)}
)

// readOnlyDecodes are the four decodes, each reporting false on a failure.
var readOnlyDecodes = []struct {
	name string
	run  func() bool
}{
	{"batch", func() bool {
		var e Event
		var d Batch
		var calls [4]Call
		r, err := DecodeBatch(callBatchMsg, &e, &d, calls[:])
		return err == nil && r != nil && len(r.Calls) == 1
	}},
	{"exec", func() bool {
		var e Event
		var r ExecRequest
		return DecodeHead(callExecMsg, &e) == nil && r.FromEvent(&e, e.ToolCallID, "echo") == nil && r.Call.Name == "echo"
	}},
	{"result", func() bool {
		var e Event
		var xr ExecResult
		return DecodeHead(callResultMsg, &e) == nil && xr.FromEvent(&e) == nil && len(xr.Output) == 1
	}},
	{"reply", func() bool {
		var e Event
		r, err := DecodeReplyView(callReplyMsg, &e, true)
		return err == nil && r != nil && len(r.Results) == 1
	}},
}

func BenchmarkReadOnlyDecodes(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range readOnlyDecodes {
			if !d.run() {
				b.Fatal(d.name)
			}
		}
	}
}

func BenchmarkReadOnlyDecode(b *testing.B) {
	for _, d := range readOnlyDecodes {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !d.run() {
					b.Fatal(d.name)
				}
			}
		})
	}
}

// BenchmarkReadOnlyEncodes makes the ce- header values of the call's two
// binary events (the router's exec, the worker's result) and the JSON of
// its two structured ones (the client's batch, the router's reply).
func BenchmarkReadOnlyEncodes(b *testing.B) {
	var exec, result, batch, reply Event
	if DecodeTo(callExecMsg, &exec) != nil || DecodeTo(callResultMsg, &result) != nil ||
		DecodeTo(callBatchMsg, &batch) != nil || DecodeTo(callReplyMsg, &reply) != nil {
		b.Fatal("decode")
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = batch.appendJSON(buf[:0])
		buf = reply.appendJSON(buf[:0])
		if v := compactAttrs(&exec); v[1] != exec.ID {
			b.Fatal(v)
		}
		if v := compactAttrs(&result); v[1] != result.ID {
			b.Fatal(v)
		}
	}
}
