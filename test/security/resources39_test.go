package security

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/mcp/bridge"
	"github.com/toolbus/toolbus/mcp/mcptest"
	"github.com/toolbus/toolbus/security"
)

// resourcesServer is the MCP server r for a bridge: one tool (echo), a
// resource and a template (session 39: the bridge's resources live under
// each login's accounts).
func resourcesServer(t *testing.T) bridge.Server {
	t.Helper()
	s := server.NewMCPServer("res", "1", server.WithResourceCapabilities(false, false))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(r.GetString("text", "")), nil
	})
	s.AddResource(mcp.NewResource("file:///notes.txt", "notes", mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "remember"}}, nil
		})
	s.AddResourceTemplate(mcp.NewResourceTemplate("file:///logs/{day}", "logs"),
		func(_ context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: r.Params.URI, MIMEType: "text/plain", Text: "log of " + r.Params.URI}}, nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return bridge.Server{Name: "r", Transport: bridge.TransportHTTP, URL: hs.URL + "/mcp"}
}

// readResources: the MCP host c lists the bridged server r's resource
// and template and reads both through the facade (P.resources.r, the
// bridge's answer on the facade's inbox).
func readResources(t *testing.T, c *mcpclient.Client) {
	t.Helper()
	waitListed(t, c, "mcp__r__echo")
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		l, err := c.ListResources(testCtx(t), mcp.ListResourcesRequest{})
		must(t, err)
		if slices.ContainsFunc(l.Resources, func(r mcp.Resource) bool { return r.URI == "file:///notes.txt" }) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the bridged resource not listed within %s: %+v", bound, l.Resources)
		}
	}
	for uri, want := range map[string]string{"file:///notes.txt": "remember", "file:///logs/mon": "log of file:///logs/mon"} {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		r, err := c.ReadResource(testCtx(t), req)
		if err != nil || len(r.Contents) != 1 {
			t.Fatalf("read %s: %+v %v", uri, r, err)
		}
		if tc, ok := r.Contents[0].(mcp.TextResourceContents); !ok || tc.Text != want {
			t.Fatalf("read %s: %+v, want %q", uri, r.Contents[0], want)
		}
	}
}

// TestBridgeResources: under the configuration file's accounts, a bridge
// logged in as the bridge user serves its server's resources to the
// facade's hosts (P.resources.r from the main account into the bridge's,
// the answer back on the facade's inbox), with no permissions violation;
// the agents, the approver and a handler may not ask for them, nor anyone
// but the bridge listen to the requests (nscRoles: the same under JWT).
func TestBridgeResources(t *testing.T) {
	d := newDeployment(t)
	bl := d.conn(security.RoleBridge)
	runBridge(t, bl, resourcesServer(t))
	url, fl := d.mcpFacade(t)
	readResources(t, mcpConnect(t, url+"/mcp/s1", hostToken, &hostNames{asked: make(chan string, 4)}))
	bl.noViolations()
	fl.noViolations()
	fl.denySubscribe("toolbus.resources.>")
	for _, user := range []string{"session-s1", security.RoleAgent, security.RoleApprover, "handler-picker"} {
		l := d.conn(user)
		l.denyPublish("toolbus.resources.r")
	}
}

// TestBridgeDiscoveryOfTwoServers (session 39, red team's known bug, fixed
// in bridge39): a bridge runs a worker per MCP server, all on its one
// connection, and the operator's discovery ping ($SRV.INFO.toolbus-worker,
// `nats micro ls`) finds both servers' tools with no permissions
// violation. Each worker answered on its own; the bridge login may answer
// a request once (allow_responses), and nats-server's check at the second
// delivery spent that once, so both answers were refused (two violations a
// ping). The workers of one connection now answer as one (worker's
// discovery.go). nscRoles: the same under JWT accounts.
func TestBridgeDiscoveryOfTwoServers(t *testing.T) {
	d := newDeployment(t)
	bl := d.conn(security.RoleBridge)
	runBridge(t, bl, resourcesServer(t), bridge.Server{Name: "q", Transport: bridge.TransportHTTP, URL: mcptest.AskServer(t)})
	ol := d.conn(security.RoleOperator)
	found := map[string]bool{}
	for deadline := time.Now().Add(bound); !found["mcp__r__echo"] || !found["mcp__q__ask"]; {
		if time.Now().After(deadline) {
			t.Fatalf("the operator's discovery found %v, want both servers' tools", found)
		}
		inbox := ol.nc.NewInbox()
		sub, err := ol.nc.SubscribeSync(inbox)
		must(t, err)
		must(t, ol.nc.PublishRequest("$SRV.INFO.toolbus-worker", inbox, nil))
		for {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				break
			}
			var in micro.Info
			must(t, json.Unmarshal(m.Data, &in))
			for _, ep := range in.Endpoints {
				found[ep.Name] = true
			}
		}
		_ = sub.Unsubscribe()
	}
	bl.noViolations()
}
