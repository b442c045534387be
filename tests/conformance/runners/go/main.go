// Conformance runner for the official Go client github.com/apache/rocketmq-clients/golang/v5.
//
//	runner INPUT.json OUTPUT.json
//
// Performs every scenario of INPUT.json in order (tests/conformance/README.md describes the
// contract and each scenario) and writes what it observed to OUTPUT.json. This file holds
// the framework: input, output, client construction and shutdown, error classification,
// and the few gRPC hooks the client lets a program install. scenarios.go holds the scenarios.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"
)

const (
	libraryPath     = "github.com/apache/rocketmq-clients/golang/v5"
	requestTimeout  = 10 * time.Second
	awaitDuration   = 2 * time.Second
	scenarioBudget  = 90 * time.Second
	startTimeout    = 20 * time.Second // a client's Start waits for the server's settings; never forever
	closeTimeout    = 12 * time.Second
	defaultInvisble = 20 * time.Second
	receiveCallMin  = 6 * time.Second
)

// ---------------------------------------------------------------- input and output

type inputFile struct {
	Endpoint  string          `json:"endpoint"`
	Language  string          `json:"language"`
	Scenarios []scenarioInput `json:"scenarios"`
}

type scenarioInput struct {
	ID     string            `json:"id"`
	Topics map[string]string `json:"topics"`
	Groups map[string]string `json:"groups"`
	Params params            `json:"params"`
	Timing params            `json:"timing"`
}

type result struct {
	Status    string         `json:"status"`
	ElapsedMs *int64         `json:"elapsed_ms,omitempty"`
	Observed  map[string]any `json:"observed,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// errUnsupported marks a scenario the client library cannot express.
type errUnsupported struct{ reason string }

func (e errUnsupported) Error() string { return e.reason }

// params reads the scenario's parameters with defaults.
type params map[string]any

func (p params) int(key string, def int) int {
	if v, ok := p[key].(float64); ok {
		return int(v)
	}
	return def
}

func (p params) int64(key string, def int64) int64 {
	if v, ok := p[key].(float64); ok {
		return int64(v)
	}
	return def
}

func (p params) str(key, def string) string {
	if v, ok := p[key].(string); ok {
		return v
	}
	return def
}

func (p params) strs(key string) []string {
	var out []string
	if vs, ok := p[key].([]any); ok {
		for _, v := range vs {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

func (p params) ints(key string) []int {
	var out []int
	if vs, ok := p[key].([]any); ok {
		for _, v := range vs {
			if f, ok := v.(float64); ok {
				out = append(out, int(f))
			}
		}
	}
	return out
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// ---------------------------------------------------------------- scenario context

// scn is one scenario's run: its resources, its parameters, and every client and
// connection it opened (closed when the scenario ends, however it ends).
type scn struct {
	id       string
	endpoint string
	topics   map[string]string
	groups   map[string]string
	p        params
	timing   params    // scenarios.json "timing": the broker settings the orchestrator applied
	budget   time.Time // when scenarioBudget runs out
	tr       *tracker
}

func (s *scn) topic(role string) string { return s.topics[role] }
func (s *scn) group(role string) string { return s.groups[role] }

// tracker remembers what a scenario opened so that it can all be closed.
type tracker struct {
	mu      sync.Mutex
	closers []func()
	rpcs    []rmq.RpcClient
	streams []*recvStream
}

func (t *tracker) addCloser(f func()) { t.mu.Lock(); t.closers = append(t.closers, f); t.mu.Unlock() }

func (t *tracker) addRPC(rc rmq.RpcClient) { t.mu.Lock(); t.rpcs = append(t.rpcs, rc); t.mu.Unlock() }

func (t *tracker) addStream(rs *recvStream) {
	t.mu.Lock()
	t.streams = append(t.streams, rs)
	t.mu.Unlock()
}

// cancelReceives cancels the in-flight ReceiveMessage long polls of one consumer group, so a
// PushConsumer's GracefulStop (which waits for them, up to its 30 s long-polling timeout)
// returns at once.
func (t *tracker) cancelReceives(group string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rs := range t.streams {
		if g, _ := rs.group.Load().(string); g == group {
			rs.cancel()
		}
	}
}

// closeAll stops every client (concurrently, bounded), then closes the gRPC connections the
// scenario's clients made: GracefulStop in v5.1.4 leaves them (and the telemetry stream) open.
func (t *tracker) closeAll() {
	t.mu.Lock()
	closers := t.closers
	t.closers = nil
	t.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(closers) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(f func()) {
			defer wg.Done()
			defer func() { _ = recover() }()
			f()
		}(closers[i])
	}
	waitBounded(&wg, closeTimeout)
	t.mu.Lock()
	rpcs := t.rpcs
	t.rpcs = nil
	streams := t.streams
	t.streams = nil
	t.mu.Unlock()
	for _, rs := range streams {
		rs.cancel()
	}
	for _, rc := range rpcs {
		func() {
			defer func() { _ = recover() }()
			_ = rc.GracefulStop()
		}()
	}
}

func waitBounded(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// par runs fns concurrently (client start-ups take about a second each) and returns the first error.
func par(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, f := range fns {
		wg.Add(1)
		go func(i int, f func() error) {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("panic: %v", r)
				}
			}()
			errs[i] = f()
		}(i, f)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func startBounded(what string, start func() error) error {
	ch := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- fmt.Errorf("panic: %v", r)
			}
		}()
		ch <- start()
	}()
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("%s start: %w", what, err)
		}
		return nil
	case <-time.After(startTimeout):
		return fmt.Errorf("%s start: no settings from the server within %v", what, startTimeout)
	}
}

// ---------------------------------------------------------------- clients

func (s *scn) config(ns, group string) *rmq.Config {
	// No credentials: the client then signs nothing.
	return &rmq.Config{Endpoint: s.endpoint, NameSpace: ns, ConsumerGroup: group}
}

// producer starts a producer that knows `topics` at start-up (the Go client's Start waits for
// the server's settings, which it only asks for once it has a topic route).
func (s *scn) producer(ns string, topics []string, checker *rmq.TransactionChecker) (rmq.Producer, error) {
	opts := []rmq.ProducerOption{rmq.WithTopics(topics...)}
	if checker != nil {
		opts = append(opts, rmq.WithTransactionChecker(checker))
	}
	p, err := rmq.NewProducer(s.config(ns, ""), opts...)
	if err != nil {
		return nil, fmt.Errorf("NewProducer: %w", err)
	}
	p.SetRequestTimeout(requestTimeout)
	s.tr.addCloser(func() { _ = p.GracefulStop() })
	if err := startBounded("producer", p.Start); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *scn) simple(ns, group string, subs map[string]*rmq.FilterExpression) (rmq.SimpleConsumer, error) {
	c, err := rmq.NewSimpleConsumer(s.config(ns, group),
		rmq.WithSimpleAwaitDuration(awaitDuration),
		rmq.WithSimpleSubscriptionExpressions(subs))
	if err != nil {
		return nil, fmt.Errorf("NewSimpleConsumer: %w", err)
	}
	c.SetRequestTimeout(requestTimeout)
	s.tr.addCloser(func() { _ = c.GracefulStop() })
	if err := startBounded("simple consumer", c.Start); err != nil {
		return nil, err
	}
	return c, nil
}

// pushOpts are the options every PushConsumer gets. WithPushAwaitDuration is accepted by
// v5.1.4 but not used: the long-polling timeout is 30 s or what the server's settings say.
func pushOpts(subs map[string]*rmq.FilterExpression, listener func(*rmq.MessageView) rmq.ConsumerResult) []rmq.PushConsumerOption {
	return []rmq.PushConsumerOption{
		rmq.WithPushSubscriptionExpressions(subs),
		rmq.WithPushAwaitDuration(awaitDuration),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: listener}),
	}
}

// stopPush stops a PushConsumer: GracefulStop waits for its in-flight long polls, which
// are cancelled here so that it returns in about a second.
func (s *scn) stopPush(pc rmq.PushConsumer, group string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		_ = pc.GracefulStop()
	}()
	time.Sleep(150 * time.Millisecond) // GracefulStop first marks it stopping: no new receive after this
	s.tr.cancelReceives(group)
	select {
	case <-done:
	case <-time.After(closeTimeout):
	}
}

// push starts a PushConsumer; it returns the function that stops it (once, however often called).
func (s *scn) push(ns, group string, subs map[string]*rmq.FilterExpression, listener func(*rmq.MessageView) rmq.ConsumerResult) (func(), error) {
	pc, err := rmq.NewPushConsumer(s.config(ns, group), pushOpts(subs, listener)...)
	if err != nil {
		return nil, fmt.Errorf("NewPushConsumer: %w", err)
	}
	pc.SetRequestTimeout(requestTimeout)
	var once sync.Once
	stop := func() { once.Do(func() { s.stopPush(pc, group) }) }
	s.tr.addCloser(stop)
	if err := startBounded("push consumer", pc.Start); err != nil {
		return nil, err
	}
	return stop, nil
}

// ---------------------------------------------------------------- receiving and acking

// isNoMessage: a long poll that found nothing (MESSAGE_NOT_FOUND) is not an error.
func isNoMessage(err error) bool {
	if rs, ok := rmq.AsErrRpcStatus(err); ok {
		return rs.Code == int32(v2.Code_MESSAGE_NOT_FOUND)
	}
	return false
}

// receiveLoop receives batches of up to 16 until `until`, or until handle returns true.
// It returns the last receive error that was not "no message" (nil if none).
func receiveLoop(c rmq.SimpleConsumer, invisible time.Duration, until time.Time, handle func(mv *rmq.MessageView, at time.Time) bool) error {
	var lastErr error
	for time.Now().Before(until) {
		// The Go SimpleConsumer puts no long-polling timeout in its ReceiveMessage request, so
		// the server derives the poll from the call's deadline (the client's own is await +
		// request timeout = 12 s). A deadline just past the window (never under 6 s: Apache's
		// proxy polls at least 5 s) keeps a poll from running far past it.
		// The server keeps 1 s of the deadline for its answer: 1.5 s past the window makes
		// the last poll end after it, never just before (a call started with a few
		// milliseconds left would poll receiveCallMin more and watch past the window).
		left := time.Until(until)
		if left < time.Second {
			break
		}
		d := left + 1500*time.Millisecond
		d = max(receiveCallMin, min(d, awaitDuration+requestTimeout))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		mvs, err := c.Receive(ctx, 16, invisible)
		cancel()
		at := time.Now()
		if err != nil {
			if !isNoMessage(err) {
				lastErr = err
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		for _, mv := range mvs {
			if handle(mv, at) {
				return lastErr
			}
		}
	}
	return lastErr
}

// ack acknowledges with the message's current receipt handle. The Go client's Ack returns nil
// even when the server answers with a non-OK status, so the status the server actually sent
// (seen by a gRPC interceptor) decides: a refusal becomes an *rmq.ErrRpcStatus here.
func ack(c rmq.SimpleConsumer, mv *rmq.MessageView) error {
	handle := mv.GetReceiptHandle()
	if err := c.Ack(context.Background(), mv); err != nil {
		return err
	}
	if v, ok := ackWire.Load(handle); ok {
		st := v.(*v2.Status)
		if st.GetCode() != v2.Code_OK {
			return &rmq.ErrRpcStatus{Code: int32(st.GetCode()), Message: st.GetMessage() + " (status of the AckMessage response; the client's Ack returned nil)"}
		}
	}
	return nil
}

// ---------------------------------------------------------------- outcomes

var codeInText = regexp.MustCompile(`CODE: ([A-Z_]+)`)

// outcome classifies an error: a RocketMQ status from the server (its numeric Code), a
// refusal by the client library before sending (side client), or ok.
func outcome(err error) map[string]any {
	if err == nil {
		return map[string]any{"outcome": "ok", "code": nil, "side": nil, "message": nil}
	}
	o := map[string]any{"outcome": "error", "code": nil, "side": "client", "message": err.Error()}
	if rs, ok := rmq.AsErrRpcStatus(err); ok {
		o["code"], o["side"] = int(rs.Code), "server"
		return o
	}
	// Some paths (e.g. a consumer's Start) format the status into the text with %v.
	if m := codeInText.FindStringSubmatch(err.Error()); m != nil {
		if code, ok := v2.Code_value[m[1]]; ok {
			o["code"], o["side"] = int(code), "server"
			return o
		}
	}
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		st := gs.GRPCStatus()
		o["message"] = fmt.Sprintf("gRPC %s: %s", st.Code(), st.Message())
		switch {
		case st.Code() == codes.Unavailable, st.Code() == codes.DeadlineExceeded, st.Code() == codes.Canceled:
			// never answered: transport or deadline, decided on this side
		case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max"):
			// gRPC's own client-side message size limit
		default:
			o["side"] = "server" // a gRPC-level status sent by the server, not a RocketMQ code
		}
	}
	return o
}

func okOutcome(err error) bool { return err == nil }

// ---------------------------------------------------------------- gRPC hooks

var (
	curTracker atomic.Pointer[tracker]
	ackWire    sync.Map // receipt handle -> *v2.Status of the AckMessage response
	prioWire   sync.Map // message id -> priority carried by the received message
)

func unaryHook(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		if resp, ok := reply.(*v2.AckMessageResponse); ok {
			if rq, ok := req.(*v2.AckMessageRequest); ok {
				for i, e := range rq.GetEntries() {
					st := resp.GetStatus()
					if i < len(resp.GetEntries()) && resp.GetEntries()[i].GetStatus().GetCode() != v2.Code_OK &&
						(st.GetCode() == v2.Code_OK || st.GetCode() == v2.Code_MULTIPLE_RESULTS) {
						st = resp.GetEntries()[i].GetStatus()
					}
					if st != nil {
						ackWire.Store(e.GetReceiptHandle(), st)
					}
				}
			}
		}
	}
	return err
}

// recvStream wraps a ReceiveMessage stream: it learns the consumer group from the request,
// can be cancelled, and notes each received message's priority (MessageView has no getter).
type recvStream struct {
	grpc.ClientStream
	cancel context.CancelFunc
	group  atomic.Value
}

func (rs *recvStream) SendMsg(m any) error {
	if r, ok := m.(*v2.ReceiveMessageRequest); ok {
		rs.group.Store(r.GetGroup().GetName())
	}
	return rs.ClientStream.SendMsg(m)
}

func (rs *recvStream) RecvMsg(m any) error {
	err := rs.ClientStream.RecvMsg(m)
	if err != nil {
		rs.cancel()
		return err
	}
	if r, ok := m.(*v2.ReceiveMessageResponse); ok {
		if msg := r.GetMessage(); msg != nil && msg.GetSystemProperties().Priority != nil {
			prioWire.Store(msg.GetSystemProperties().GetMessageId(), *msg.GetSystemProperties().Priority)
		}
	}
	return nil
}

func streamHook(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !strings.HasSuffix(method, "/ReceiveMessage") {
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx2, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	rs := &recvStream{ClientStream: cs, cancel: cancel}
	if t := curTracker.Load(); t != nil {
		t.addStream(rs)
	}
	return rs, nil
}

// setupClientLibrary: plain-text gRPC, the client's logs in files under logDir, and the gRPC
// hooks above (installed through the exported NewRpcClient factory: the connection options a
// client is built with are not passed on to its connections in v5.1.4).
func setupClientLibrary(logDir string) {
	_ = os.MkdirAll(logDir, 0o755)
	if os.Getenv(rmq.CLIENT_LOG_ROOT) == "" {
		_ = os.Setenv(rmq.CLIENT_LOG_ROOT, logDir)
	}
	if os.Getenv(rmq.ENABLE_CONSOLE_APPENDER) == "" {
		_ = os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "false")
	}
	rmq.ResetLogger()
	rmq.EnableSsl = false

	grpcLogFile, err := os.OpenFile(filepath.Join(logDir, "grpc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	var grpcOut io.Writer = io.Discard
	if err == nil {
		grpcOut = grpcLogFile
	}
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, grpcOut, grpcOut)) // warnings and errors
	zl := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(grpcOut), zap.InfoLevel))

	orig := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		opts = append(opts, rmq.WithRpcClientConnOption(
			rmq.WithDialOptions(grpc.WithChainUnaryInterceptor(unaryHook), grpc.WithChainStreamInterceptor(streamHook)),
			rmq.WithZapLogger(zl)))
		rc, err := orig(target, opts...)
		if err == nil {
			if t := curTracker.Load(); t != nil {
				t.addRPC(rc)
			}
		}
		return rc, err
	}
}

func libraryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == libraryPath {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "unknown"
}

// ---------------------------------------------------------------- main

func runOne(in scenarioInput, endpoint string) result {
	fn, ok := scenarioFuncs[in.ID]
	if !ok {
		return result{Status: "error", Error: "this runner does not know scenario " + in.ID}
	}
	if in.Params == nil {
		in.Params = params{}
	}
	tr := &tracker{}
	curTracker.Store(tr)
	s := &scn{id: in.ID, endpoint: endpoint, topics: in.Topics, groups: in.Groups, p: in.Params, timing: in.Timing, tr: tr,
		budget: time.Now().Add(scenarioBudget)}
	type ret struct {
		obs map[string]any
		err error
	}
	ch := make(chan ret, 1)
	start := time.Now()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- ret{err: fmt.Errorf("panic: %v\n%s", r, debug.Stack())}
			}
		}()
		obs, err := fn(s)
		ch <- ret{obs, err}
	}()
	var r ret
	select {
	case r = <-ch:
	case <-time.After(scenarioBudget):
		r = ret{err: fmt.Errorf("timeout: the scenario did not finish within %v", scenarioBudget)}
	}
	elapsed := ms(time.Since(start))
	tr.closeAll()
	curTracker.Store(nil)
	var ue errUnsupported
	switch {
	case errors.As(r.err, &ue):
		return result{Status: "unsupported", Reason: ue.reason}
	case r.err != nil:
		return result{Status: "error", Error: r.err.Error(), ElapsedMs: &elapsed}
	default:
		return result{Status: "ok", ElapsedMs: &elapsed, Observed: r.obs}
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: runner INPUT.json OUTPUT.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "read input:", err)
		os.Exit(2)
	}
	var in inputFile
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintln(os.Stderr, "parse input:", err)
		os.Exit(2)
	}
	outPath, _ := filepath.Abs(os.Args[2])
	logDir := os.Getenv("CONFORMANCE_GO_LOG_DIR")
	if logDir == "" {
		logDir = filepath.Join(filepath.Dir(outPath), "go-client-logs")
	}
	setupClientLibrary(logDir)

	results := map[string]result{}
	for _, sc := range in.Scenarios {
		fmt.Fprintf(os.Stderr, "[go runner] %s ...\n", sc.ID)
		r := runOne(sc, in.Endpoint)
		results[sc.ID] = r
		el := int64(0)
		if r.ElapsedMs != nil {
			el = *r.ElapsedMs
		}
		fmt.Fprintf(os.Stderr, "[go runner] %s: %s (%d ms) %s%s\n", sc.ID, r.Status, el, r.Error, r.Reason)
	}
	out := map[string]any{
		"client":  map[string]any{"language": "go", "library": libraryPath, "version": libraryVersion()},
		"results": results,
	}
	data, _ := json.MarshalIndent(out, "", "  ")
	if err := os.WriteFile(outPath, append(data, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "write output:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// sortedStrings returns a sorted copy (never nil, so JSON gets [] rather than null).
func sortedStrings(xs []string) []string {
	out := append([]string{}, xs...)
	sort.Strings(out)
	return out
}
