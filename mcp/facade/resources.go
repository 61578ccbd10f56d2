package facade

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/offload"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp/bridge"
)

// Resources of a session: docs/mcp.md "Mapping: resources".

// DefaultMaxResource bounds what one resources/read of a stored output
// returns (Config.MaxResource).
const DefaultMaxResource = 16 << 20

const (
	maxResourceServers = 32               // the bridged servers one listing asks
	resourcesBudget    = 10 * time.Second // one listing of every server's resources
	outputsTemplate    = offload.Scheme + "://{bucket}/{+name}"
)

// resources owns a session's resources. mcp is set once the MCP server is
// made (newSession); the hooks read it only when a request comes.
type resources struct {
	session, user string
	mcp           *server.MCPServer
	list          listFunc
	nc            *nats.Conn // for the resources verb (P.resources.<server>, docs/protocol.md 12)
	prefix        string
	fetch         outputFetcher
	maxResource   int64
	log           *slog.Logger
}

// outputFetcher reads a session's stored output (client.Outputs).
type outputFetcher interface {
	FetchSession(ctx context.Context, session, ref string) (*client.Output, error)
}

var _ outputFetcher = client.Outputs{}

// options are the server options and hooks of the resources capability:
// listed and read on demand, no subscriptions, no listChanged.
func (s *resources) options(hooks *server.Hooks) []server.ServerOption {
	hooks.AddBeforeListResources(func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest) { s.syncResources(ctx) })
	hooks.AddBeforeListResourceTemplates(func(ctx context.Context, _ any, _ *mcp.ListResourceTemplatesRequest) {
		s.syncResources(ctx)
	})
	hooks.AddBeforeReadResource(func(ctx context.Context, _ any, r *mcp.ReadResourceRequest) {
		if _, listed := s.mcp.ListResources()[r.Params.URI]; !listed && !strings.HasPrefix(r.Params.URI, offload.Scheme+"://") {
			s.syncResources(ctx) // a URI from a result, not listed yet
		}
	})
	hooks.AddAfterListResources(func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if res != nil {
			downgradeResources(revisionFrom(ctx), res.Resources, nil)
		}
	})
	hooks.AddAfterListResourceTemplates(func(ctx context.Context, _ any, _ *mcp.ListResourceTemplatesRequest, res *mcp.ListResourceTemplatesResult) {
		if res != nil {
			downgradeResources(revisionFrom(ctx), nil, res.ResourceTemplates)
		}
	})
	return []server.ServerOption{server.WithResourceCapabilities(false, false)}
}

// syncResources registers the session's bridged servers' resources (and the
// stored-outputs template) with the MCP server; a failing server is left out.
func (s *resources) syncResources(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, resourcesBudget)
	defer cancel()
	var resources []server.ServerResource
	templates := []server.ServerResourceTemplate{s.outputsTemplate()}
	seen := map[string]bool{}
	for _, srv := range s.bridgedServers(ctx) {
		var l bridge.ResourcesListed
		if err := s.request(ctx, srv, bridge.TypeResourcesList, bridge.ResourcesList{}, bridge.TypeResourcesListed, &l); err != nil {
			s.log.Debug("facade: resources of a bridged server", "server", srv, "err", err)
			continue
		}
		for _, r := range l.Resources {
			if seen[r.URI] {
				continue // the first server with a URI serves it (docs/mcp.md)
			}
			seen[r.URI] = true
			res := mcp.Resource{URI: r.URI, Name: r.Name, Title: r.Title, Description: r.Description, MIMEType: r.MediaType}
			res.Annotations = mcpAnnotations(r.Annotations)
			resources = append(resources, server.ServerResource{Resource: res, Handler: s.readBridged(srv)})
		}
		for _, t := range l.Templates {
			tp, err := templateOf(t)
			if err != nil {
				s.log.Debug("facade: a bridged template", "server", srv, "err", err)
				continue
			}
			templates = append(templates, server.ServerResourceTemplate{Template: tp, Handler: server.ResourceTemplateHandlerFunc(s.readBridged(srv))})
		}
	}
	s.mcp.SetResources(resources...)
	s.mcp.SetResourceTemplates(templates...)
}

// bridgedServers are the MCP servers of the tools the session lists to
// its user, sorted, at most maxResourceServers.
func (s *resources) bridgedServers(ctx context.Context) []string {
	list, err := s.list(ctx, s.session, s.user, bus.FormatToolbus)
	if err != nil {
		return nil
	}
	var out []string
	for _, raw := range list.Tools {
		var d bus.ToolDef
		if json.Unmarshal(raw, &d) == nil && d.MCP != nil && d.MCP.Server != "" && !slices.Contains(out, d.MCP.Server) {
			out = append(out, d.MCP.Server)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), maxResourceServers)]
}

// request asks srv's resources verb and decodes its reply of type want
// into out.
func (s *resources) request(ctx context.Context, srv, typ string, data any, want string, out any) error {
	e, err := bus.NewEvent(typ, "toolbus/mcp", data)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		e.ExpiryTime = dl.UTC().Format(time.RFC3339Nano)
	}
	m, err := bus.SendRequest(ctx, s.nc, bridge.ResourcesSubject(s.prefix, srv), e)
	if err != nil {
		return fmt.Errorf("the resources of MCP server %q: %w", srv, err)
	}
	r, err := bus.Decode(m)
	if err != nil {
		return err
	}
	if r.Type == bus.TypeError {
		var be bus.Error
		if r.DataAs(&be) == nil {
			return &be
		}
		return fmt.Errorf("MCP server %q: an error reply", srv)
	}
	if r.Type != want {
		return fmt.Errorf("MCP server %q answered %s, not %s", srv, r.Type, want)
	}
	return r.DataAs(out)
}

// readBridged reads a URI of server srv, when the session still lists a
// tool of srv to its user.
func (s *resources) readBridged(srv string) server.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		ctx, cancel := context.WithTimeout(ctx, resourcesBudget)
		defer cancel()
		if !slices.Contains(s.bridgedServers(ctx), srv) {
			return nil, fmt.Errorf("the MCP server %q is no longer among the session's tools' servers", srv)
		}
		var c bridge.ResourcesContents
		if err := s.request(ctx, srv, bridge.TypeResourcesRead, bridge.ResourcesRead{URI: req.Params.URI},
			bridge.TypeResourcesContents, &c); err != nil {
			return nil, err
		}
		out := make([]mcp.ResourceContents, 0, len(c.Contents))
		for _, b := range c.Contents {
			uri := cmp.Or(b.URI, req.Params.URI)
			if b.Type == bus.BlockText {
				out = append(out, mcp.TextResourceContents{URI: uri, MIMEType: b.MediaType, Text: b.Text})
			} else {
				out = append(out, mcp.BlobResourceContents{URI: uri, MIMEType: b.MediaType, Blob: b.Data})
			}
		}
		return out, nil
	}
}

func templateOf(t bridge.ResourceTemplate) (tp mcp.ResourceTemplate, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("template %q of %s is not an RFC 6570 URI template", t.URITemplate, t.Name)
		}
	}()
	tp = mcp.NewResourceTemplate(t.URITemplate, t.Name, mcp.WithTemplateDescription(t.Description), mcp.WithTemplateMIMEType(t.MediaType))
	tp.Title = t.Title
	tp.Annotations = mcpAnnotations(t.Annotations)
	return tp, nil
}

func mcpAnnotations(a *bus.Annotations) *mcp.Annotations {
	if a == nil {
		return nil
	}
	ann := &mcp.Annotations{Priority: a.Priority, LastModified: a.LastModified}
	for _, who := range a.Audience {
		ann.Audience = append(ann.Audience, mcp.Role(who))
	}
	return ann
}

func (s *resources) outputsTemplate() server.ServerResourceTemplate {
	tp := mcp.NewResourceTemplate(outputsTemplate, "toolbus_outputs",
		mcp.WithTemplateDescription("A stored output of session "+s.session+": the nats-object:// URL of a result's data block, exactly as the result gives it (with #sha256=)."))
	return server.ServerResourceTemplate{Template: tp, Handler: s.readOutput}
}

var errOtherSession = errors.New("the stored output belongs to another session: this MCP endpoint reads only its own session's outputs")

// readOutput reads a stored output of the session, byte for byte: text
// for a text media type whose bytes are UTF-8, else a base64 blob. A
// reference of another session is refused before anything is published.
func (s *resources) readOutput(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	ref, err := offload.ParseRef(uri)
	if err != nil {
		return nil, err
	}
	if ref.Session() != s.session {
		return nil, errOtherSession
	}
	if ref.Digest == "" {
		return nil, fmt.Errorf("%s has no #sha256=<digest>: give the URL exactly as the result has it", uri)
	}
	b, media, err := readStored(ctx, s.fetch, s.session, uri, s.maxResource, "in one resources/read")
	if err != nil {
		return nil, err
	}
	if isTextMedia(media) && utf8.Valid(b) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: media, Text: string(b)}}, nil
	}
	return []mcp.ResourceContents{mcp.BlobResourceContents{URI: uri, MIMEType: media, Blob: base64.StdEncoding.EncodeToString(b)}}, nil
}

// readStored reads a stored output of session whole, with its media
// type; one above max bytes is refused with its size before any of it is
// read (how: what the endpoint does not return).
func readStored(ctx context.Context, fetch outputFetcher, session, uri string, max int64, how string) ([]byte, string, error) {
	o, err := fetch.FetchSession(ctx, session, uri)
	if err != nil {
		return nil, "", err
	}
	defer o.Close()
	if o.Size > max {
		return nil, "", fmt.Errorf("the stored output %s is %d bytes, more than this MCP endpoint returns %s (%d bytes); read it with `toolbus fetch %s`",
			uri, o.Size, how, max, uri)
	}
	b, err := io.ReadAll(io.LimitReader(o, max+1))
	if err != nil {
		return nil, "", err
	}
	if int64(len(b)) != o.Size {
		return nil, "", fmt.Errorf("the stored output %s read %d of %d bytes", uri, len(b), o.Size)
	}
	return b, o.MediaType, nil
}

// isTextMedia reports whether a media type is text, JSON or XML.
func isTextMedia(media string) bool {
	mt, _, err := mime.ParseMediaType(media)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), mt == "application/json", mt == "application/xml",
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	return false
}
