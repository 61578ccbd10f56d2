package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/testkit/xtest"
)

// mcpHTTP is mcp-go's streamable HTTP server on loopback serving the same
// trivial tool, and one mcp-go client per caller, each with its own session
// and its own HTTP connection pool (as separate agents would have).
type mcpHTTP struct {
	hs         *http.Server
	served     sync.WaitGroup
	streamable *mcpserver.StreamableHTTPServer
	clients    []*mcpclient.Client
	transports []*http.Transport
	protocol   string // the negotiated protocol revision
	closeOnce  sync.Once
}

// serve starts the server on a loopback port and returns its URL.
func (m *mcpHTTP) serve() (string, error) {
	s := mcpserver.NewMCPServer("toolbus-bench", "1.0.0", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(toolRead, mcp.WithDescription("Echo the text (read-only)."),
		mcp.WithString("text", mcp.Required(), mcp.Description("Text to echo back.")),
		mcp.WithReadOnlyHintAnnotation(true)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text, err := req.RequireString("text")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return mcp.NewToolResultText(text), nil
		})
	m.streamable = mcpserver.NewStreamableHTTPServer(s, mcpserver.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: mcp listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", m.streamable)
	m.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.served.Go(func() {
		if err := m.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Debug("bench: mcp server", "err", err)
		}
	})
	return "http://" + ln.Addr().String() + "/mcp", nil
}

// connect starts n initialized clients of the server at url.
func (m *mcpHTTP) connect(ctx context.Context, url string, n int) error {
	for range n {
		tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
		m.transports = append(m.transports, tr)
		c, err := mcpclient.NewStreamableHttpClient(url, transport.WithHTTPBasicClient(&http.Client{Transport: tr}))
		if err != nil {
			return fmt.Errorf("bench: mcp client: %w", err)
		}
		m.clients = append(m.clients, c)
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("bench: mcp client start: %w", err)
		}
		req := mcp.InitializeRequest{}
		req.Params.ClientInfo = mcp.Implementation{Name: "toolbus-bench", Version: "1.0.0"}
		res, err := c.Initialize(ctx, req)
		if err != nil {
			return fmt.Errorf("bench: mcp initialize: %w", err)
		}
		m.protocol = res.ProtocolVersion
	}
	return nil
}

// call calls the tool through client i.
func (m *mcpHTTP) call(ctx context.Context, i int) error {
	var req mcp.CallToolRequest
	req.Params.Name = toolRead
	req.Params.Arguments = map[string]any{"text": "hello"}
	res, err := m.clients[i%len(m.clients)].CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("bench: mcp call: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("bench: mcp call: tool error %v", res.Content)
	}
	return nil
}

// close stops the clients and the server; it is safe to call twice.
func (m *mcpHTTP) close(ctx context.Context) {
	m.closeOnce.Do(func() {
		for _, c := range m.clients {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), xtest.StopTimeout)
		defer cancel()
		if m.streamable != nil {
			_ = m.streamable.Shutdown(ctx)
		}
		if m.hs != nil {
			_ = m.hs.Shutdown(ctx)
			m.served.Wait()
		}
		for _, tr := range m.transports {
			tr.CloseIdleConnections()
		}
	})
}
