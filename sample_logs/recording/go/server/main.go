// Recording server: the Go MCP SDK (github.com/modelcontextprotocol/go-sdk v1.8.0) over Streamable HTTP on
// 127.0.0.1, with the SDK's own MemoryEventStore, for sample_logs/real-go-server-*. Tool slow_count(steps)
// sends a progress notification every --interval and, after the steps in --close-at, closes its SSE stream
// with the SDK's server-initiated disconnect (RequestExtra.CloseSSEStream, retry --retry-ms): the client
// resumes with GET + Last-Event-ID and the server replays from the store. Every store call is printed
// (STORE / REPLAY lines: the ground truth of what the server emitted), and `EVENT <step>` after each step.
//
//	go-rec-server --port 18080 --close-at 2 --retry-ms 500 --interval 0.4
package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var outMu sync.Mutex

func logf(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf("%s %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), fmt.Sprintf(format, args...))
}

func short(b []byte) string {
	s := string(b)
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// tracingStore is the SDK's MemoryEventStore with a line per call.
type tracingStore struct{ *mcp.MemoryEventStore }

func (s tracingStore) Append(ctx context.Context, session, stream string, data []byte) error {
	logf("STORE session=%.8s stream=%q %s", session, stream, short(data))
	return s.MemoryEventStore.Append(ctx, session, stream, data)
}

func (s tracingStore) After(ctx context.Context, session, stream string, index int) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		n := 0
		for d, err := range s.MemoryEventStore.After(ctx, session, stream, index) {
			if err != nil {
				logf("REPLAY session=%.8s stream=%q after=%d error: %v", session, stream, index, err)
			} else {
				n++
				logf("REPLAY session=%.8s stream=%q after=%d #%d %s", session, stream, index, n, short(d))
			}
			if !yield(d, err) {
				return
			}
		}
		logf("REPLAY session=%.8s stream=%q after=%d done (%d events)", session, stream, index, n)
	}
}

type countArgs struct {
	Steps int `json:"steps,omitempty" jsonschema:"number of steps (default 5)"`
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1")
	closeAt := flag.String("close-at", "", "comma-separated steps after which the tool's stream is closed")
	retryMS := flag.Int("retry-ms", 500, "retry sent when the stream is closed")
	interval := flag.Float64("interval", 0.4, "seconds between steps")
	flag.Parse()
	var cuts []int
	for _, c := range strings.Split(*closeAt, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(c)); err == nil {
			cuts = append(cuts, n)
		}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "go-rec-server", Version: "0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "slow_count", Description: "Count to `steps`, reporting progress; may close its SSE stream mid-way."},
		func(ctx context.Context, req *mcp.CallToolRequest, args countArgs) (*mcp.CallToolResult, any, error) {
			steps := args.Steps
			if steps <= 0 {
				steps = 5
			}
			logf("TOOL START slow_count steps=%d", steps)
			for i := 1; i <= steps; i++ {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(i), Total: float64(steps), Message: fmt.Sprintf("step %d/%d", i, steps)})
				}
				logf("EVENT %d", i)
				if slices.Contains(cuts, i) && req.Extra != nil && req.Extra.CloseSSEStream != nil {
					time.Sleep(100 * time.Millisecond) // let the step's event reach the wire
					req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: time.Duration(*retryMS) * time.Millisecond})
					logf("CLOSE %d", i)
				}
				if i < steps {
					time.Sleep(time.Duration(*interval * float64(time.Second)))
				}
			}
			logf("TOOL END slow_count")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("counted to %d", steps)}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{EventStore: tracingStore{mcp.NewMemoryEventStore(nil)}})
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	logf("server: go-sdk v1.8.0 on %s close_at=%v retry=%dms", addr, cuts, *retryMS)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
