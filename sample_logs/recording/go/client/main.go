// Recording client: the Go MCP SDK (github.com/modelcontextprotocol/go-sdk v1.8.0) over
// Streamable HTTP, for sample_logs/real-go-client-*. It prints, one timestamped line each, what
// the application received (progress, log notifications, each call's result or error) and every
// HTTP request the transport made (method, Last-Event-ID, status): the ground truth the analyzer's
// verdicts are checked against. Loopback only; every wait has a deadline.
//
//	go-rec-client http://127.0.0.1:PORT/mcp --steps 5 --call-timeout 15s
//	    [--pre sleep:0.5 --pre 'call:add:{"a":2,"b":3}' --pre ping] [--follow-up] [--max-retries N]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var outMu sync.Mutex

// tagged prefixes a session's lines ("[A] ", "[B] " with --pair; nothing for one session).
type tagged string

func (t tagged) logf(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf("%s %s%s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), string(t), fmt.Sprintf(format, args...))
}

// loggingTransport logs each HTTP exchange the SDK's transport makes (it adds no header:
// the User-Agent stays net/http's default), and the id/data/retry lines of every SSE body as the
// SDK reads them (what reached the client, before the SDK decides what to do with it).
type loggingTransport struct {
	base http.RoundTripper
	t    tagged
}

var streamSeq atomic.Int64

type sseTap struct {
	body  io.ReadCloser
	t     tagged
	name  string
	buf   []byte
	ended bool
}

func (t *sseTap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	t.buf = append(t.buf, p[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(t.buf[:i]), "\r")
		t.buf = t.buf[i+1:]
		if strings.HasPrefix(line, "id:") || strings.HasPrefix(line, "data:") || strings.HasPrefix(line, "retry:") {
			if len(line) > 200 {
				line = line[:200] + "..."
			}
			t.t.logf("sse %s: %s", t.name, line)
		}
	}
	if err != nil && !t.ended {
		t.ended = true
		t.t.logf("sse %s: body ended (%v)", t.name, err)
	}
	return n, err
}

func (t *sseTap) Close() error { return t.body.Close() }

func (t loggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	extra := ""
	if id := req.Header.Get("Last-Event-ID"); id != "" {
		extra = " Last-Event-ID=" + id
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		t.t.logf("http: %s%s -> error %v", req.Method, extra, err)
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		name := fmt.Sprintf("stream#%d(%s)", streamSeq.Add(1), req.Method)
		t.t.logf("http: %s%s -> %d %s = %s", req.Method, extra, resp.StatusCode, ct, name)
		resp.Body = &sseTap{body: resp.Body, t: t.t, name: name}
		return resp, err
	}
	t.t.logf("http: %s%s -> %d %s", req.Method, extra, resp.StatusCode, ct)
	return resp, err
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func describe(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, strconv.Quote(t.Text))
		}
	}
	return fmt.Sprintf("RESULT isError=%v content=%s", res.IsError, strings.Join(parts, ","))
}

func call(ctx context.Context, t tagged, cs *mcp.ClientSession, name string, args map[string]any, token string, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	if token != "" {
		params.SetProgressToken(token)
	}
	a, _ := json.Marshal(args)
	t.logf("calling tools/call %s %s (timeout %s)", name, a, timeout)
	res, err := cs.CallTool(cctx, params)
	if err != nil {
		t.logf("tools/call %s %s -> FAILED %v", name, a, err)
		return
	}
	t.logf("tools/call %s %s -> %s", name, a, describe(res))
}

type options struct {
	endpoint   string
	maxRetries int
	version    string
	followUp   bool
	noGET      bool
	pre        []string
}

// session connects, runs the --pre steps, calls `tool` and, with --follow-up, pings and lists the tools.
func session(ctx context.Context, t tagged, o options, tool string, args map[string]any, callTimeout time.Duration) {
	client := mcp.NewClient(&mcp.Implementation{Name: "go-rec-client", Version: "0"}, &mcp.ClientOptions{
		Logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			p := req.Params
			t.logf("progress %v/%v %q (token %v)", p.Progress, p.Total, p.Message, p.ProgressToken)
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			d, _ := json.Marshal(req.Params.Data)
			t.logf("log notification %s: %s", req.Params.Level, d)
		},
	})
	transport := &mcp.StreamableClientTransport{
		Endpoint:   o.endpoint,
		HTTPClient: &http.Client{Transport: loggingTransport{http.DefaultTransport, t}},
		MaxRetries: o.maxRetries,
		// (--no-standalone-sse: no GET stream of its own, so the only GET is the call's resume)
		DisableStandaloneSSE: o.noGET,
	}
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: o.version})
	if err != nil {
		t.logf("connect FAILED %v", err)
		return
	}
	res := cs.InitializeResult()
	t.logf("initialized: session %s protocol %s server %s %s", cs.ID(), res.ProtocolVersion, res.ServerInfo.Name, res.ServerInfo.Version)
	ping := func() {
		if err := cs.Ping(ctx, nil); err != nil {
			t.logf("ping -> FAILED %v", err)
		} else {
			t.logf("ping -> ok")
		}
	}
	for _, p := range o.pre {
		switch {
		case strings.HasPrefix(p, "sleep:"):
			s, _ := strconv.ParseFloat(strings.TrimPrefix(p, "sleep:"), 64)
			time.Sleep(time.Duration(s * float64(time.Second)))
		case p == "ping":
			ping()
		case strings.HasPrefix(p, "call:"):
			rest := strings.SplitN(strings.TrimPrefix(p, "call:"), ":", 2)
			var a map[string]any
			if len(rest) == 2 {
				_ = json.Unmarshal([]byte(rest[1]), &a)
			}
			call(ctx, t, cs, rest[0], a, "", 5*time.Second)
		}
	}
	call(ctx, t, cs, tool, args, strings.ReplaceAll(tool, "_", "-"), callTimeout)
	if o.followUp {
		ping()
		if tl, err := cs.ListTools(ctx, nil); err != nil {
			t.logf("tools/list -> FAILED %v", err)
		} else {
			var names []string
			for _, tool := range tl.Tools {
				names = append(names, tool.Name)
			}
			t.logf("tools/list -> %s", strings.Join(names, ", "))
		}
	}
	if err := cs.Close(); err != nil {
		t.logf("close -> %v", err)
	} else {
		t.logf("Close() returned nil (a DELETE, if one was sent, is logged above)")
	}
}

func main() {
	steps := flag.Int("steps", 5, "slow_count steps")
	callTimeout := flag.Duration("call-timeout", 15*time.Second, "deadline of the slow_count call")
	timeout := flag.Duration("timeout", 40*time.Second, "deadline of the whole run")
	maxRetries := flag.Int("max-retries", 0, "StreamableClientTransport.MaxRetries (0 = the SDK default, 5)")
	version := flag.String("protocol-version", "2025-11-25", "ClientSessionOptions.ProtocolVersion ('' = the SDK default)")
	followUp := flag.Bool("follow-up", false, "after the call: ping and tools/list")
	noGET := flag.Bool("no-standalone-sse", false, "StreamableClientTransport.DisableStandaloneSSE")
	pair := flag.String("pair", "", "two sessions at once: A calls this tool, B calls slow_count --stagger later")
	pairSteps := flag.Int("pair-steps", 3, "--pair: steps of A's tool")
	stagger := flag.Duration("stagger", 500*time.Millisecond, "--pair: B starts this long after A")
	var pre multi
	flag.Var(&pre, "pre", "before slow_count: sleep:SECONDS, call:TOOL:JSON or ping (repeatable)")
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: go-rec-client URL [options]")
		os.Exit(2)
	}
	o := options{endpoint: os.Args[1]}
	_ = flag.CommandLine.Parse(os.Args[2:])
	o.maxRetries, o.version, o.followUp, o.noGET, o.pre = *maxRetries, *version, *followUp, *noGET, pre
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *pair == "" {
		session(ctx, "", o, "slow_count", map[string]any{"steps": *steps}, *callTimeout)
	} else {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			session(ctx, "[A] ", o, *pair, map[string]any{"steps": *pairSteps}, *callTimeout)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(*stagger)
			session(ctx, "[B] ", o, "slow_count", map[string]any{"steps": *steps}, *callTimeout)
		}()
		wg.Wait()
	}
	tagged("").logf("client: done")
}
