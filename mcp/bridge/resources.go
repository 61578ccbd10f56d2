package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// Resources (docs/protocol.md 12): the bridge serves its servers' resources
// on P.resources.<server> (queue group P-resources-<server>).

// Event types of the resources verb.
const (
	TypeResourcesList     = "io.toolbus.resources.list"     // data ResourcesList
	TypeResourcesListed   = "io.toolbus.resources.listed"   // data ResourcesListed
	TypeResourcesRead     = "io.toolbus.resources.read"     // data ResourcesRead
	TypeResourcesContents = "io.toolbus.resources.contents" // data ResourcesContents
)

const (
	maxReaders   = 16   // a server's resource requests in flight; more are refused
	maxResources = 1000 // each list; the rest is left out (Truncated)
)

// ResourcesSubject is the subject the resources of server are served on.
func ResourcesSubject(prefix, server string) string {
	return bus.NewSubjects(prefix).Prefix + ".resources." + server
}

// ResourcesList is the data of io.toolbus.resources.list.
type ResourcesList struct{}

// ResourcesRead is the data of io.toolbus.resources.read.
type ResourcesRead struct {
	URI string `json:"uri"`
}

// Resource is one resource of a server: Name is mcp__<server>__<its name>
// (as tool names are made), URI the server's own.
type Resource struct {
	Name        string           `json:"name"`
	URI         string           `json:"uri"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	MediaType   string           `json:"media_type,omitempty"`
	Annotations *bus.Annotations `json:"annotations,omitempty"`
}

// ResourceTemplate is one resource template of a server (RFC 6570).
type ResourceTemplate struct {
	Name        string           `json:"name"`
	URITemplate string           `json:"uri_template"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	MediaType   string           `json:"media_type,omitempty"`
	Annotations *bus.Annotations `json:"annotations,omitempty"`
}

// ResourcesListed is the data of io.toolbus.resources.listed.
type ResourcesListed struct {
	Server    string             `json:"server"`
	Resources []Resource         `json:"resources"`
	Templates []ResourceTemplate `json:"templates"`
	Truncated bool               `json:"truncated,omitempty"`
}

// ResourcesContents is the data of io.toolbus.resources.contents: the
// resource's contents as blocks, as in tool results.
type ResourcesContents struct {
	Contents []bus.Block `json:"contents"`
}

// resourceServer serves a server's resources verb over its connection.
type resourceServer struct {
	s          *Server
	nc         *nats.Conn
	prefix, id string                                                              // Config.Prefix, Config.ID
	conn       func(ctx context.Context, dead *mcpclient.Client) *mcpclient.Client // link.connection
	readers    chan struct{}                                                       // a semaphore of maxReaders
	log        *slog.Logger
}

// serveResources subscribes the server's resources verb; base is the
// parent of every request's context.
func (rs *resourceServer) serveResources(base context.Context) (*nats.Subscription, error) {
	subj := ResourcesSubject(rs.prefix, rs.s.Name)
	queue := bus.NewSubjects(rs.prefix).Prefix + "-resources-" + rs.s.Name
	return rs.nc.QueueSubscribe(subj, queue, func(m *nats.Msg) {
		select {
		case rs.readers <- struct{}{}:
		default:
			_ = bus.RespondError(rs.nc, m, rs.source(), bus.Errorf(bus.CodeLimitExceeded,
				"MCP server %q already has %d resource requests in flight; try again", rs.s.Name, maxReaders))
			return
		}
		go func() {
			defer func() { <-rs.readers }()
			rs.resourceRequest(base, m)
		}()
	})
}

func (rs *resourceServer) source() string { return "toolbus/bridge/" + rs.id }

func (rs *resourceServer) resourceRequest(ctx context.Context, m *nats.Msg) {
	typ, data, err := rs.resources(ctx, m)
	var b []byte
	if err == nil {
		b, err = json.Marshal(data)
	}
	if err == nil && int64(len(b)) > rs.nc.MaxPayload()-64<<10 {
		err = bus.Errorf(bus.CodeLimitExceeded, "the resource is %d bytes, more than a message may carry", len(b))
	}
	if err != nil {
		var be *bus.Error
		if !errors.As(err, &be) {
			be = bus.Errorf(bus.CodeInternal, "%v", err)
		}
		_ = bus.RespondError(rs.nc, m, rs.source(), be)
		return
	}
	_ = bus.Respond(rs.nc, m, rs.source(), typ, json.RawMessage(b))
}

func (rs *resourceServer) resources(ctx context.Context, m *nats.Msg) (string, any, error) {
	e, err := bus.Decode(m)
	if err != nil {
		return "", nil, bus.Errorf(bus.CodeBadEvent, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, rs.s.setupTimeout())
	defer cancel()
	if exp, err := e.Expiry(); err == nil && !exp.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, exp)
		defer cancel()
	}
	cl := rs.conn(ctx, nil)
	if cl == nil {
		return "", nil, bus.Errorf(bus.CodeUnavailable, "MCP server %q is not connected", rs.s.Name)
	}
	if cl.GetServerCapabilities().Resources == nil {
		return "", nil, bus.Errorf(bus.CodeUnavailable, "MCP server %q has no resources", rs.s.Name)
	}
	switch e.Type {
	case TypeResourcesList:
		var q ResourcesList
		if err := strictData(e, &q); err != nil {
			return "", nil, err
		}
		out, err := rs.listResources(ctx, cl)
		return TypeResourcesListed, out, err
	case TypeResourcesRead:
		var q ResourcesRead
		if err := strictData(e, &q); err != nil {
			return "", nil, err
		}
		if q.URI == "" {
			return "", nil, bus.Errorf(bus.CodeBadRequest, "resources.read: uri is missing")
		}
		res, err := cl.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: q.URI}})
		if err != nil {
			return "", nil, bus.Errorf(bus.CodeToolError, "resources/read %s: %v", q.URI, err)
		}
		out := ResourcesContents{Contents: []bus.Block{}}
		for _, c := range res.Contents {
			out.Contents = append(out.Contents, resource(c))
		}
		return TypeResourcesContents, out, nil
	}
	return "", nil, bus.Errorf(bus.CodeBadRequest, "the resources verb takes %s or %s, not %q", TypeResourcesList, TypeResourcesRead, e.Type)
}

// strictData decodes e's data into v, refusing unknown members.
func strictData(e *bus.Event, v any) error {
	if len(e.Data) == 0 || string(e.Data) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(e.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bus.Errorf(bus.CodeBadRequest, "%s: %v", e.Type, err)
	}
	return nil
}

// listResources lists the server's resources and resource templates, at
// most maxResources of each. A server that repeats a page's cursor ends
// its listing there.
func (rs *resourceServer) listResources(ctx context.Context, cl *mcpclient.Client) (*ResourcesListed, error) {
	out := &ResourcesListed{Server: rs.s.Name, Resources: []Resource{}, Templates: []ResourceTemplate{}}
	for r, err := range cl.IterResources(ctx, mcp.ListResourcesRequest{}) {
		if errors.Is(err, mcpclient.ErrRepeatedListCursor) {
			break
		} else if err != nil {
			return nil, bus.Errorf(bus.CodeToolError, "resources/list: %v", err)
		}
		if len(out.Resources) == maxResources {
			out.Truncated = true
			break
		}
		out.Resources = append(out.Resources, Resource{Name: ToolName(rs.s.Name, r.Name), URI: r.URI, Title: r.Title,
			Description: r.Description, MediaType: r.MIMEType, Annotations: annotate(bus.Block{}, r.Annotations).Annotations})
	}
	for t, err := range cl.IterResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{}) {
		if err != nil {
			// Templates are optional: a server without them may refuse.
			rs.log.Debug("bridge: resources/templates/list", "err", err)
			break
		}
		if len(out.Templates) == maxResources {
			out.Truncated = true
			break
		}
		raw := ""
		if t.URITemplate != nil && t.URITemplate.Template != nil {
			raw = t.URITemplate.Raw()
		}
		out.Templates = append(out.Templates, ResourceTemplate{Name: ToolName(rs.s.Name, t.Name), URITemplate: raw, Title: t.Title,
			Description: t.Description, MediaType: t.MIMEType, Annotations: annotate(bus.Block{}, t.Annotations).Annotations})
	}
	return out, nil
}
