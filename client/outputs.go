package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
)

// Output is a stored output opened for reading (protocol 5.9): Read
// returns its bytes and checks their SHA-256 against the reference's at
// the end; Size, MediaType and Digest describe it. Close it when done.
type Output = offload.Object

// Outputs reads stored outputs (docs/protocol.md 5.9) through the Client
// it came from: Client.Outputs returns it; it is a value, cheap to make
// and safe for concurrent use.
type Outputs struct{ c *Client }

// Outputs returns the Client's reader of stored outputs.
func (c *Client) Outputs() Outputs { return Outputs{c} }

// Fetch opens the stored output a data block's url refers to
// (nats-object://<bucket>/<name>#sha256=<digest>, exactly as the result
// has it), reading it through the routers on P.outputs.<session>, where
// session is the name's first token (toolbus names start with the
// session; FetchSession names another). The router serves only that
// session's objects, and only their recorded bytes: an unknown, expired,
// other session's or overwritten output is an error that says so. Later
// reads use ctx too.
func (o Outputs) Fetch(ctx context.Context, ref string) (*Output, error) {
	r, err := offload.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	return o.FetchSession(ctx, r.Session(), ref)
}

// FetchSession is Fetch through P.outputs.<session>.
func (o Outputs) FetchSession(ctx context.Context, session, ref string) (*Output, error) {
	c := o.c
	r, err := offload.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	if r.Digest == "" {
		return nil, fmt.Errorf("client: fetch: %s has no #sha256=<digest>: give the url exactly as the result has it", ref)
	}
	first, err := c.rq.window(ctx, session, ref, 0)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	if first.Digest != r.Digest {
		return nil, fmt.Errorf("client: fetch %s: the router served an object with digest %s", ref, first.Digest)
	}
	pending := first.Data
	return offload.NewObject(first.Size, first.MediaType, r.Digest, func(off int64) ([]byte, error) {
		if off == 0 && pending != nil {
			b := pending
			pending = nil
			return b, nil
		}
		ch, err := c.rq.window(ctx, session, ref, off)
		if err != nil {
			return nil, err
		}
		if ch.Size != first.Size || ch.Digest != r.Digest || ch.Offset != off {
			return nil, errors.New("the object changed while it was read")
		}
		return ch.Data, nil
	}), nil
}

// FetchDirect opens a stored output by reading the outputs object store
// itself, from its stream's leader (an operator's read: agents have no
// access to the store). A digest in ref must be the object's, and the
// bytes are checked against it at the end.
func (o Outputs) FetchDirect(ctx context.Context, ref string) (*Output, error) {
	c := o.c
	out, err := offload.NewStore(c.nc, c.subj.ObjectStore(bus.ObjectOutputs)).Open(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("client: fetch: %w", err)
	}
	return out, nil
}

// FetchBytes reads a whole stored output into memory (Fetch).
func (o Outputs) FetchBytes(ctx context.Context, ref string) ([]byte, error) {
	out, err := o.Fetch(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	b, err := io.ReadAll(out)
	if err != nil {
		return nil, fmt.Errorf("client: fetch %s: %w", ref, err)
	}
	return b, nil
}
