package bridge

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"sigs.k8s.io/yaml"

	"github.com/toolbus/toolbus/bus"
)

// File is the bridge's configuration file, YAML or JSON: optional groups,
// and servers each with name, transport (stdio, sse or http), command, args,
// env and cwd or url and headers, group, timeout and enable_tools or
// disable_tools (docs/mcp.md; examples/mcp/servers.yaml).
type File struct {
	Groups  []bus.Group `json:"groups,omitempty"`
	Servers []Server    `json:"servers"`
}

// Transports of a Server.
const (
	TransportStdio = "stdio"
	TransportSSE   = "sse"
	TransportHTTP  = "http"
)

// Server is one MCP server to bridge.
type Server struct {
	// Name names the server in its tools' names (mcp__<name>__<tool>); it
	// must match ^[A-Za-z0-9_-]{1,40}$.
	Name string `json:"name"`
	// Transport is stdio, sse or http (streamable HTTP); "" means stdio
	// when Command is set, else http.
	Transport string `json:"transport,omitempty"`
	// Command, Args, Env and Cwd start a stdio server. Env adds to the
	// bridge's own environment.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// URL and Headers reach an SSE or streamable HTTP server.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// EnableTools, when not empty, bridges only these tools (MCP names);
	// DisableTools leaves these out. A name in both is a config error.
	EnableTools  []string `json:"enable_tools,omitempty"`
	DisableTools []string `json:"disable_tools,omitempty"`
	// Group is the group of every tool of the server; "" means basic.
	Group string `json:"group,omitempty"`
	// Timeout is each tool's timeout (a Go duration); "" means 300s. It
	// also bounds connecting and initialising.
	Timeout string `json:"timeout,omitempty"`
	// Roots are what roots/list answers the server: directories or
	// file:// URIs; none means the bridge's Config.Roots (the worker's
	// --workdir).
	Roots []string `json:"roots,omitempty"`
	// SamplingTool is the bus tool that answers the server's
	// sampling/createMessage (called in the asking call's session with the
	// request's params as input); "" refuses sampling.
	SamplingTool string `json:"sampling_tool,omitempty"`

	timeout time.Duration
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// Load reads and validates a configuration file.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bridge: config: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("bridge: config %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a configuration (YAML or JSON, unknown members refused)
// and validates it.
func Parse(b []byte) (*File, error) {
	f := &File{}
	if err := yaml.UnmarshalStrict(b, f); err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Validate checks every server and fills defaults: transport, timeout,
// group scopes.
func (f *File) Validate() error {
	seen := map[string]bool{}
	for i := range f.Groups {
		f.Groups[i].Scope = cmp.Or(f.Groups[i].Scope, bus.ScopeMeta)
		if !bus.ValidName(f.Groups[i].Name) {
			return fmt.Errorf("group %q: name must match ^[A-Za-z0-9_-]{1,64}$", f.Groups[i].Name)
		}
	}
	for i := range f.Servers {
		s := &f.Servers[i]
		if err := s.validate(); err != nil {
			return fmt.Errorf("server %q: %w", s.Name, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("server %q: listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

func (s *Server) validate() error {
	if !serverName.MatchString(s.Name) || strings.Contains(s.Name, "__") || strings.HasSuffix(s.Name, "_") {
		// Else mcp__a__b__c is server a's b__c and server a__b's c (TestAttackToolNameAcrossServers).
		return fmt.Errorf("name must match %s, hold no \"__\" and not end in \"_\": it is the middle of mcp__<name>__<tool>", serverName)
	}
	if s.Transport == "" {
		s.Transport = TransportHTTP
		if s.Command != "" {
			s.Transport = TransportStdio
		}
	}
	switch s.Transport {
	case TransportStdio:
		if s.Command == "" {
			return fmt.Errorf("transport stdio needs a command")
		}
		if s.URL != "" || len(s.Headers) > 0 {
			return fmt.Errorf("transport stdio takes no url or headers")
		}
	case TransportSSE, TransportHTTP:
		if s.URL == "" {
			return fmt.Errorf("transport %s needs a url", s.Transport)
		}
		if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != "" {
			return fmt.Errorf("transport %s takes no command, args, env or cwd", s.Transport)
		}
	default:
		return fmt.Errorf("transport %q is not stdio, sse or http", s.Transport)
	}
	for _, t := range s.EnableTools {
		if slices.Contains(s.DisableTools, t) {
			return fmt.Errorf("tool %q is in both enable_tools and disable_tools", t)
		}
	}
	if s.SamplingTool != "" && !bus.ValidName(s.SamplingTool) {
		return fmt.Errorf("sampling_tool %q must match ^[A-Za-z0-9_-]{1,64}$", s.SamplingTool)
	}
	for _, r := range s.Roots {
		if r == "" || strings.ContainsRune(r, 0) || (strings.Contains(r, "://") && !strings.HasPrefix(r, "file://")) {
			return fmt.Errorf("root %q is not a directory or a file:// URI", r)
		}
	}
	if s.Group != "" && !bus.ValidName(s.Group) {
		return fmt.Errorf("group %q must match ^[A-Za-z0-9_-]{1,64}$", s.Group)
	}
	s.timeout = time.Duration(bus.DefaultTimeoutMS) * time.Millisecond
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d < time.Millisecond {
			return fmt.Errorf("timeout %q is not a positive duration", s.Timeout)
		}
		s.timeout = d
	}
	return nil
}

func (s *Server) bridged(name string) bool {
	if len(s.EnableTools) > 0 && !slices.Contains(s.EnableTools, name) {
		return false
	}
	return !slices.Contains(s.DisableTools, name)
}

// setupTimeout bounds initialize, tools/list and the creation of a task:
// the server's timeout, but at least 10 s (a stdio server has to start)
// and at most 30 s.
func (s *Server) setupTimeout() time.Duration {
	return min(max(s.timeout, 10*time.Second), 30*time.Second)
}

// unknownNames returns the names of EnableTools and DisableTools that
// none of tools has.
func (s *Server) unknownNames(tools []mcp.Tool) []string {
	var out []string
	for _, n := range slices.Concat(s.EnableTools, s.DisableTools) {
		if !slices.ContainsFunc(tools, func(t mcp.Tool) bool { return t.Name == n }) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
