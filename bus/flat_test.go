package bus

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
	"unsafe"

	fastjson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
)

var flatSeeds = []string{
	`{"specversion":"1.0","id":"r1","source":"toolbus/client/c1","type":"io.toolbus.call.batch","datacontenttype":"application/json","time":"2026-12-01T10:41:34.452Z","sessionid":"s1","data":{"calls":[{"id":"c1","name":"echo","input":{"q":"x\"y"}}],"sessionrev":3}}`,
	`{"specversion": "1.0", "id": "r1", "source": "py", "type": "io.toolbus.call.batch", "data": {"calls": []}}`,
	` { "data" : [1,2,{"a":"}"}] , "id":"x" ,"type":"t","source":"s","specversion":"1.0"} `,
	`{"specversion":"1.0","id":"x","id":"y","source":"s","type":"t"}`,
	`{"specversion":"1.0","ID":"x","source":"s","type":"t"}`,
	`{"specversion":"1.0","id":"x\u0041","source":"s","type":"t"}`,
	`{"specversion":"1.0","id":"ü","source":"s","type":"t"}`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","data":null}`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","data":"str"}`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":1}}x`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":}}`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","data_base64":"e30="}`,
	`{"specversion":"1.0","id":"x","source":"s","type":"t","extension":"v"}`,
	`{"specversion":1,"id":"x","source":"s","type":"t"}`,
	`{}`, `{`, `{"id":"x",}`, `[]`, ``,
}

// decodeFlat reads what it takes exactly as the general decoder does.
func TestDecodeFlatIsGoccys(t *testing.T) {
	for _, s := range flatSeeds {
		checkFlat(t, []byte(s))
	}
	var e Event
	if !decodeFlat([]byte(flatSeeds[0]), &e) || !decodeFlat([]byte(flatSeeds[1]), &e) || !decodeFlat([]byte(flatSeeds[2]), &e) {
		t.Error("the plain forms are not read by decodeFlat")
	}
	for _, s := range flatSeeds[3:] {
		if decodeFlat([]byte(s), &Event{}) {
			t.Errorf("decodeFlat took %s, which is the general decoder's to judge", s)
		}
	}
}

func FuzzDecodeFlat(f *testing.F) {
	for _, s := range flatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFlat(t, b) })
}

func checkFlat(t *testing.T, b []byte) {
	t.Helper()
	var flat Event
	if !decodeFlat(b, &flat) {
		return
	}
	var general Event
	if err := fastjson.Unmarshal(b, &general); err != nil {
		t.Fatalf("decodeFlat took %q, which the general decoder refuses: %v", b, err)
	}
	if general.DataBase64 != "" || isNull(general.Data) {
		t.Fatalf("decodeFlat took %q with data the general decoder reads otherwise", b)
	}
	if !reflect.DeepEqual(flat, general) {
		t.Fatalf("%q:\ndecodeFlat %+v\ngeneral    %+v", b, flat, general)
	}
}

// DecodeHead reads what DecodeTo reads, the same event; it may take more
// only when the data is not JSON (it leaves that to the data's decoder).
func checkHead(t *testing.T, b []byte) {
	t.Helper()
	var head, full Event
	herr := DecodeHead(&nats.Msg{Data: b}, &head)
	ferr := DecodeTo(&nats.Msg{Data: bytes.Clone(b)}, &full)
	switch {
	case ferr == nil && herr != nil:
		t.Fatalf("%q: DecodeHead refuses what DecodeTo reads: %v", b, herr)
	case ferr == nil && !reflect.DeepEqual(head, full):
		t.Fatalf("%q:\nDecodeHead %+v\nDecodeTo   %+v", b, head, full)
	case ferr != nil && herr == nil && fastjson.Valid(head.Data):
		t.Fatalf("%q: DecodeHead reads, with JSON data, what DecodeTo refuses: %v", b, ferr)
	}
	// headView reads what DecodeHead reads, views for copies.
	var view Event
	if verr := headView(&nats.Msg{Data: bytes.Clone(b)}, &view); (verr == nil) != (herr == nil) || herr == nil && !reflect.DeepEqual(view, head) {
		t.Fatalf("%q:\nheadView %+v, %v\nDecodeHead     %+v, %v", b, view, verr, head, herr)
	}
	// The same body in binary mode.
	h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"x"}, "ce-source": {"s"}, "ce-type": {TypeExec}, "content-type": {ContentTypeJSON}}
	herr = DecodeHead(&nats.Msg{Header: h, Data: b}, &head)
	ferr = DecodeTo(&nats.Msg{Header: h, Data: bytes.Clone(b)}, &full)
	switch {
	case ferr == nil && (herr != nil || !reflect.DeepEqual(head, full)):
		t.Fatalf("%q in binary mode: DecodeHead %+v, %v; DecodeTo %+v", b, head, herr, full)
	case ferr != nil && herr == nil && json.Valid(head.Data):
		t.Fatalf("%q in binary mode: DecodeHead reads, with JSON data, what DecodeTo refuses: %v", b, ferr)
	}
}

func TestDecodeHeadIsDecodeTo(t *testing.T) {
	for _, s := range append(flatSeeds, `{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":}}`) {
		checkHead(t, []byte(s))
	}
	b := []byte(flatSeeds[0])
	var e Event
	if err := DecodeHead(&nats.Msg{Data: b}, &e); err != nil || len(e.Data) == 0 || &e.Data[0] != &b[bytes.Index(b, []byte(`{"calls"`))] {
		t.Fatalf("DecodeHead: %v, data not a slice of the message's", err)
	}
	if err := DecodeHead(&nats.Msg{Data: []byte(`{"specversion":"1.0","id":"x","source":"s","type":"t","data":{"a":}}`)}, &e); err != nil || e.DataAs(new(any)) == nil {
		t.Fatalf("data that is not JSON: %v, then DataAs succeeds", err)
	}
	// A view's attributes are the message's bytes, and cost no allocation.
	m := &nats.Msg{Data: b}
	if err := headView(m, &e); err != nil || unsafe.StringData(e.ID) != &b[bytes.Index(b, []byte(e.ID))] {
		t.Fatalf("headView: %v, id not a view of the message's", err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = headView(m, &e) }); n != 0 && !raceEnabled {
		t.Errorf("headView: %v allocations, want 0", n)
	}
}

func FuzzDecodeHead(f *testing.F) {
	for _, s := range flatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkHead(t, b) })
}

// quotedByBytes is quoted as it was before plainRun, byte by byte: the
// reference FuzzQuoted holds quoted to.
func quotedByBytes(b []byte) (s []byte, escaped, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, false, false
	}
	for j := 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[1:j], escaped, true
		case c == '\\':
			if j+1 >= len(b) || unescape(b[j+1]) == 0 {
				return nil, false, false
			}
			escaped = true
			j++
		case c < 0x20 || c > 0x7e:
			return nil, false, false
		}
	}
	return nil, false, false
}

func FuzzQuoted(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\n"`, `"tab	in"`, "\"del\x7f\"", `"é"`, "\"\x80\"", `"\q"`, `"\`, `"open`, `""`, `x`,
		`"0123456789abcdefghij"`, `"0123456789abcdef\"ghij"`, "\"0123456789abcdef\x1fghij\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := flatParser{b: b}
		s, esc, ok := p.quoted()
		lead := len(b) - len(bytes.TrimLeft(b, " \t\n\r"))
		ws, wesc, wok := quotedByBytes(b[lead:])
		if ok != wok || esc != wesc || !bytes.Equal(s, ws) || ok && p.i != lead+len(s)+2 {
			t.Fatalf("%q: quoted %q %v %v (at %d), want %q %v %v", b, s, esc, ok, p.i, ws, wesc, wok)
		}
	})
}

// appendStringByChars is appendString a character at a time: printable
// ASCII and DEL as they are, any other character (an invalid byte alone)
// as appendString writes it alone. FuzzAppendString holds appendString's
// runs to it.
func appendStringByChars(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		if c := s[i]; c >= ' ' && c < utf8.RuneSelf && c != '"' && c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		one := appendString(nil, s[i:i+size])
		b = append(b, one[1:len(one)-1]...)
		i += size
	}
	return append(b, '"')
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"plain", `a"b\c`, "tab\tnl\ncr\r", "del\x7f", "é ü", "bad\x80\xff", "\x00\x1f", "0123456789abcdef\x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendString([]byte("x"), s), appendStringByChars([]byte("x"), s); !bytes.Equal(got, want) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	})
}

// plainRunByBytes is plainRun a byte at a time: the reference FuzzPlainRun
// holds its eight-byte steps to.
func plainRunByBytes(s []byte) int {
	for j, c := range s {
		if !plainByte[c] {
			return j
		}
	}
	return len(s)
}

func FuzzPlainRun(f *testing.F) {
	for _, s := range []string{"", "plain", "0123456789abcdef", "0123456789abcdef\"", "01234567\\9abcdef", "0123\x1f567", "0123456\x7f",
		"01234567\x80", "~~~~~~~~ ", "\xff\xff\xff\xff\xff\xff\xff\xff", "        !", "\x20\x21\x22\x23\x5b\x5c\x5d\x7e"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := plainRunByBytes(b)
		if got := plainRun(b); got != want {
			t.Fatalf("%q: plainRun %d, want %d", b, got, want)
		}
		if got := plainRun(string(b)); got != want {
			t.Fatalf("%q: plainRun of the string %d, want %d", b, got, want)
		}
	})
}

// Every byte value at every place of an eight-byte step and of the tail
// after it: plainRun stops at it exactly when it is not a plainByte, and
// plainValue refuses it exactly when it is not ASCII or is '%'.
func TestPlainRunEachByte(t *testing.T) {
	for at := range 12 {
		for c := range 256 {
			b := []byte("abcdefghijkl")
			b[at] = byte(c)
			if got, want := plainRun(b), plainRunByBytes(b); got != want {
				t.Fatalf("%q: plainRun %d, want %d", b, got, want)
			}
			if got, want := plainValue(string(b)), c < utf8.RuneSelf && c != '%'; got != want {
				t.Fatalf("%q: plainValue %v, want %v", b, got, want)
			}
		}
	}
}

// checked takes only JSON, and ends where scan (value before checked:
// the matching bracket, then goccy's Valid) does; value reads as scan.
func FuzzChecked(f *testing.F) {
	for _, s := range []string{`{"text":"hello"}`, `{}`, `[]`, `[1,-0,0,12]`, `{"a":{"a":[true,false,null]}}x`, ` { "a" : [ 1 , "}" ] } `,
		`{"a":01}`, `{"a":1.5}`, `{"a":1e3}`, `{"a":-}`, `{"a":tru}`, `{"a":truex}`, `[1 2]`, `[1,]`, `{,}`, `{"a"}`, `{"a":"\u0041"}`,
		`{"a":"é"}`, "{\"a\":\"\x7f\"}", `{"a":"\q"}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`, `{"a":1,"a":2}`,
		`[12345678901234567890]`, `["x"}`, `{"a":1]`, `[- 1]`, `[-]`, `[-x]`, `[-01]`, ` "x" `, `-1`, `1.5`, `nul`, ``, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if validJSON(b) != json.Valid(b) {
			t.Fatalf("%q: validJSON %v", b, !json.Valid(b))
		}
		if len(b) == 0 || b[0] != '{' && b[0] != '[' {
			return
		}
		wantEnd, wantOK := (&flatParser{b: b}).scan()
		p := flatParser{b: b}
		if p.checked(maxCheckedDepth) && (!wantOK || p.i != wantEnd || !json.Valid(b[:p.i])) {
			t.Fatalf("%q: checked took %q; the scan: end %d, ok %v", b, b[:p.i], wantEnd, wantOK)
		}
		p = flatParser{b: b}
		if end, ok := p.value(); ok != wantOK || ok && end != wantEnd {
			t.Fatalf("%q: value %d %v, want %d %v", b, end, ok, wantEnd, wantOK)
		}
	})
}

// headView is DecodeReplyView without the reply: DecodeHead with views.
func headView(m *nats.Msg, e *Event) error {
	_, err := DecodeReplyView(m, e, false)
	return err
}
