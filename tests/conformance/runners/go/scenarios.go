package main

// The scenarios of tests/conformance/scenarios.json, one function each (README: "Scenarios:
// what each observes").

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

var scenarioFuncs = map[string]func(*scn) (map[string]any, error){
	"send_receive":          sendReceive,
	"tag_filter":            tagFilter,
	"sql_filter":            sqlFilter,
	"sql_filter_malformed":  sqlFilterMalformed,
	"fifo_order":            fifoOrder,
	"fifo_redelivery":       fifoRedelivery,
	"delay_timestamp":       delayTimestamp,
	"delay_too_far":         delayTooFar,
	"tx_commit":             func(s *scn) (map[string]any, error) { return txEnd(s, true) },
	"tx_rollback":           func(s *scn) (map[string]any, error) { return txEnd(s, false) },
	"tx_check_commit":       txCheck,
	"tx_check_rollback":     txCheck,
	"tx_check_unknown":      txCheck,
	"invisible_redelivery":  invisibleRedelivery,
	"change_invisible":      changeInvisible,
	"ack_stale_handle":      ackStaleHandle,
	"push_consumer":         pushConsumer,
	"push_retry_dlq":        pushRetryDLQ,
	"bad_input":             badInput,
	"namespace_isolation":   namespaceIsolation,
	"message_type_mismatch": messageTypeMismatch,
	"priority":              priority,
	"lite":                  lite,
}

var bg = context.Background()

func subAll(topic string) map[string]*rmq.FilterExpression {
	return map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}
}

// consumerAndProducer starts a SimpleConsumer on group g of topic t (filter fe) and a producer
// for t, concurrently.
func (s *scn) consumerAndProducer(ns string, fe *rmq.FilterExpression) (rmq.SimpleConsumer, rmq.Producer, error) {
	t, g := s.topic("t"), s.group("g")
	var c rmq.SimpleConsumer
	var p rmq.Producer
	err := par(
		func() (e error) { c, e = s.simple(ns, g, map[string]*rmq.FilterExpression{t: fe}); return },
		func() (e error) { p, e = s.producer(ns, []string{t}, nil); return },
	)
	return c, p, err
}

func msg(topic, body string) *rmq.Message { return &rmq.Message{Topic: topic, Body: []byte(body)} }

func send1(p rmq.Producer, m *rmq.Message) (*rmq.SendReceipt, error) {
	rs, err := p.Send(bg, m)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("send returned no receipt")
	}
	return rs[0], nil
}

// receiveBodies receives (acking each) for d and returns the bodies.
func receiveBodies(c rmq.SimpleConsumer, d time.Duration) ([]string, error) {
	var bodies []string
	err := receiveLoop(c, defaultInvisble, time.Now().Add(d), func(mv *rmq.MessageView, _ time.Time) bool {
		bodies = append(bodies, string(mv.GetBody()))
		_ = ack(c, mv)
		return false
	})
	return bodies, err
}

func errText(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

// ---------------------------------------------------------------- basic send / receive

func sendReceive(s *scn) (map[string]any, error) {
	count, tag := s.p.int("count", 5), s.p.str("tag", "TagA")
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	t := s.topic("t")
	sendOK := 0
	sentIDs, sendErrors := []string{}, []string{}
	for i := 0; i < count; i++ {
		m := msg(t, fmt.Sprintf("m%d", i))
		m.SetTag(tag)
		m.SetKeys(fmt.Sprintf("k-%d", i), fmt.Sprintf("x-%d", i))
		m.AddProperty("p1", fmt.Sprintf("v%d", i))
		m.AddProperty("p2", "x")
		r, err := send1(p, m)
		if err != nil {
			sendErrors = append(sendErrors, err.Error())
			continue
		}
		sendOK++
		sentIDs = append(sentIDs, r.MessageID)
	}
	var got []map[string]any
	var gotIDs []string
	ackFailures := 0
	recvErr := receiveLoop(c, defaultInvisble, time.Now().Add(15*time.Second), func(mv *rmq.MessageView, _ time.Time) bool {
		var mg any
		if g := mv.GetMessageGroup(); g != nil {
			mg = *g
		}
		var tg any
		if tt := mv.GetTag(); tt != nil {
			tg = *tt
		}
		props := map[string]any{}
		for k, v := range mv.GetProperties() {
			props[k] = v
		}
		got = append(got, map[string]any{
			"body": string(mv.GetBody()), "tag": tg, "keys": sortedStrings(mv.GetKeys()),
			"properties": props, "topic": mv.GetTopic(),
			"delivery_attempt": mv.GetDeliveryAttempt(), "message_group": mg,
		})
		gotIDs = append(gotIDs, mv.GetMessageId())
		if ack(c, mv) != nil {
			ackFailures++
		}
		return len(got) >= count
	})
	sort.SliceStable(got, func(i, j int) bool { return got[i]["body"].(string) < got[j]["body"].(string) })
	obs := map[string]any{
		"send_ok":     sendOK,
		"messages":    got,
		"ids_unique":  distinct(sentIDs) && sameSet(sentIDs, gotIDs),
		"send_errors": sendErrors,
	}
	if got == nil {
		obs["messages"] = []any{}
	}
	if ackFailures > 0 {
		obs["ack_failures"] = ackFailures
	}
	if recvErr != nil {
		obs["receive_error"] = recvErr.Error()
	}
	return obs, nil
}

func distinct(xs []string) bool {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}

func sameSet(a, b []string) bool {
	sa, sb := map[string]bool{}, map[string]bool{}
	for _, x := range a {
		sa[x] = true
	}
	for _, x := range b {
		sb[x] = true
	}
	if len(sa) != len(sb) {
		return false
	}
	for x := range sa {
		if !sb[x] {
			return false
		}
	}
	return true
}

func tagFilter(s *scn) (map[string]any, error) {
	expr := s.p.str("expression", "A||B")
	c, p, err := s.consumerAndProducer("", rmq.NewFilterExpressionWithType(expr, rmq.TAG))
	if err != nil {
		return nil, err
	}
	for i, tag := range s.p.strs("tags") {
		m := msg(s.topic("t"), fmt.Sprintf("%d-%s", i, tag))
		m.SetTag(tag)
		if _, err := send1(p, m); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	bodies, recvErr := receiveBodies(c, 6*time.Second)
	return map[string]any{"bodies": sortedStrings(bodies), "receive_error": errText(recvErr)}, nil
}

func sqlFilter(s *scn) (map[string]any, error) {
	expr := s.p.str("expression", "n > 2 AND TAGS = 'A'")
	c, p, err := s.consumerAndProducer("", rmq.NewFilterExpressionWithType(expr, rmq.SQL92))
	if err != nil {
		return nil, err
	}
	for i := 0; i < s.p.int("count", 6); i++ {
		m := msg(s.topic("t"), fmt.Sprintf("s%d", i))
		m.AddProperty("n", strconv.Itoa(i))
		if i%2 == 1 {
			m.SetTag("A")
		} else {
			m.SetTag("B")
		}
		if _, err := send1(p, m); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	bodies, recvErr := receiveBodies(c, 6*time.Second)
	return map[string]any{"bodies": sortedStrings(bodies), "receive_error": errText(recvErr)}, nil
}

func sqlFilterMalformed(s *scn) (map[string]any, error) {
	expr := s.p.str("expression", "n >")
	c, err := s.simple("", s.group("g"), map[string]*rmq.FilterExpression{
		s.topic("t"): rmq.NewFilterExpressionWithType(expr, rmq.SQL92)})
	stage := "start"
	if err == nil {
		stage = "receive"
		_, err = c.Receive(bg, 16, defaultInvisble)
		if isNoMessage(err) {
			err = nil
		}
	}
	o := outcome(err)
	o["stage"] = stage
	return o, nil
}

// ---------------------------------------------------------------- FIFO

func fifoOrder(s *scn) (map[string]any, error) {
	groups, perGroup := s.p.int("groups", 3), s.p.int("per_group", 8)
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	t := s.topic("t")
	for k := 0; k < perGroup; k++ {
		for j := 0; j < groups; j++ {
			m := msg(t, fmt.Sprintf("g%d-%d", j, k))
			m.SetMessageGroup(fmt.Sprintf("g%d", j))
			if _, err := send1(p, m); err != nil {
				return nil, fmt.Errorf("send g%d-%d: %w", j, k, err)
			}
		}
	}
	// As the other runners: received counts deliveries (a redelivered copy too), a group's
	// order is kept when its sequence numbers arrived non-decreasing, and a message without
	// a group shows as "" among the message groups.
	total := groups * perGroup
	received := 0
	arrivals := map[string][]int{} // body's group -> sequence numbers in arrival order
	mgs := map[string]bool{}
	recvErr := receiveLoop(c, defaultInvisble, time.Now().Add(30*time.Second), func(mv *rmq.MessageView, _ time.Time) bool {
		body := string(mv.GetBody())
		mg := ""
		if g := mv.GetMessageGroup(); g != nil {
			mg = *g
		}
		mgs[mg] = true
		if i := strings.LastIndex(body, "-"); i > 0 {
			n, _ := strconv.Atoi(body[i+1:])
			arrivals[body[:i]] = append(arrivals[body[:i]], n)
		}
		received++
		_ = ack(c, mv)
		return received >= total
	})
	orderKept := map[string]bool{}
	for g, seq := range arrivals {
		orderKept[g] = sort.IntsAreSorted(seq)
	}
	var groupsSeen []string
	for g := range mgs {
		groupsSeen = append(groupsSeen, g)
	}
	return map[string]any{"received": received, "order_kept": orderKept,
		"message_groups": sortedStrings(groupsSeen), "arrivals": arrivals, "receive_error": errText(recvErr)}, nil
}

// receiveBatches is receiveLoop a batch at a time: handle gets each non-empty batch whole
// (and its arrival time) and returns true to stop.
func receiveBatches(c rmq.SimpleConsumer, invisible time.Duration, until time.Time, handle func(mvs []*rmq.MessageView, at time.Time) bool) error {
	var lastErr error
	for time.Now().Before(until) {
		d := max(receiveCallMin, min(time.Until(until)+time.Second, awaitDuration+requestTimeout))
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
		if len(mvs) > 0 && handle(mvs, at) {
			return lastErr
		}
	}
	return lastErr
}

// fifoRedelivery: consumer A takes one batch of a FIFO group and dies without acking it;
// consumer B of the same group then receives (acking each) until it has every body.
func fifoRedelivery(s *scn) (map[string]any, error) {
	count := s.p.int("count", 4)
	invisible := time.Duration(s.p.int("invisible_ms", 3000)) * time.Millisecond
	t, g := s.topic("t"), s.group("g")
	a, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	for i := 0; i < count; i++ {
		m := msg(t, fmt.Sprintf("f%d", i))
		m.SetMessageGroup("m")
		if _, err := send1(p, m); err != nil {
			return nil, fmt.Errorf("send f%d: %w", i, err)
		}
	}
	// A: one batch (the first receive that returns something), never acked.
	var aBatch []*rmq.MessageView
	var aAt time.Time
	aErr := receiveBatches(a, invisible, time.Now().Add(15*time.Second), func(mvs []*rmq.MessageView, at time.Time) bool {
		aBatch, aAt = mvs, at
		return true
	})
	// A dies (the scenario's end stops it again, which the client refuses harmlessly).
	_ = a.GracefulStop()
	b, err := s.simple("", g, subAll(t))
	if err != nil {
		return nil, err
	}
	aBodies, bBodies, bAttempts := []string{}, []string{}, []int32{}
	for _, mv := range aBatch {
		aBodies = append(aBodies, string(mv.GetBody()))
	}
	distinctBodies := map[string]bool{}
	var firstB time.Time
	bErr := receiveBatches(b, defaultInvisble, time.Now().Add(25*time.Second), func(mvs []*rmq.MessageView, at time.Time) bool {
		if firstB.IsZero() {
			firstB = at
		}
		for _, mv := range mvs {
			body := string(mv.GetBody())
			bBodies = append(bBodies, body)
			bAttempts = append(bAttempts, mv.GetDeliveryAttempt())
			distinctBodies[body] = true
			_ = ack(b, mv)
		}
		return len(distinctBodies) >= count
	})
	var after any
	if len(aBatch) > 0 && !firstB.IsZero() {
		after = ms(firstB.Sub(aAt))
	}
	return map[string]any{"a_bodies": aBodies, "b_bodies": bBodies, "b_attempts": bAttempts,
		"redelivered_after_ms": after, "a_receive_error": errText(aErr), "b_receive_error": errText(bErr)}, nil
}

// ---------------------------------------------------------------- delay

func delayTimestamp(s *scn) (map[string]any, error) {
	delays := s.p.ints("delays_ms")
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	due := map[string]time.Time{}
	var order []string
	for i, d := range delays {
		body := fmt.Sprintf("d%d", i)
		at := time.Now().Add(time.Duration(d) * time.Millisecond)
		m := msg(s.topic("t"), body)
		m.SetDelayTimestamp(at)
		if _, err := send1(p, m); err != nil {
			return nil, fmt.Errorf("send %s: %w", body, err)
		}
		due[body], order = at, append(order, body)
	}
	arrived := map[string]time.Time{}
	recvErr := receiveLoop(c, defaultInvisble, time.Now().Add(20*time.Second), func(mv *rmq.MessageView, at time.Time) bool {
		body := string(mv.GetBody())
		if _, dup := arrived[body]; !dup {
			arrived[body] = at
		}
		_ = ack(c, mv)
		return len(arrived) >= len(delays)
	})
	lateness := []any{}
	for _, body := range order {
		if at, ok := arrived[body]; ok {
			lateness = append(lateness, ms(at.Sub(due[body])))
		} else {
			lateness = append(lateness, nil)
		}
	}
	return map[string]any{"received": len(arrived), "lateness_ms": lateness, "receive_error": errText(recvErr)}, nil
}

func delayTooFar(s *scn) (map[string]any, error) {
	t := s.topic("t")
	p, err := s.producer("", []string{t}, nil)
	if err != nil {
		return nil, err
	}
	m := msg(t, "far")
	m.SetDelayTimestamp(time.Now().Add(time.Duration(s.p.int64("delay_ms", 2592000000)) * time.Millisecond))
	_, err = send1(p, m)
	return outcome(err), nil
}

// ---------------------------------------------------------------- transactions

// txChecker answers answers[k] to its k-th call (the last one again after the list) and
// records the time of each call.
type txChecker struct {
	mu      sync.Mutex
	answers []string
	calls   []time.Time
}

func (tc *txChecker) checker() *rmq.TransactionChecker {
	return &rmq.TransactionChecker{Check: func(*rmq.MessageView) rmq.TransactionResolution {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		k := len(tc.calls)
		tc.calls = append(tc.calls, time.Now())
		ans := "COMMIT"
		if len(tc.answers) > 0 {
			ans = tc.answers[min(k, len(tc.answers)-1)]
		}
		switch strings.ToUpper(ans) {
		case "COMMIT":
			return rmq.COMMIT
		case "ROLLBACK":
			return rmq.ROLLBACK
		}
		return rmq.UNKNOWN
	}}
}

func (tc *txChecker) snapshot() []time.Time {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]time.Time{}, tc.calls...)
}

func (s *scn) txClients(tc *txChecker) (rmq.SimpleConsumer, rmq.Producer, error) {
	t, g := s.topic("t"), s.group("g")
	var c rmq.SimpleConsumer
	var p rmq.Producer
	err := par(
		func() (e error) { c, e = s.simple("", g, subAll(t)); return },
		func() (e error) { p, e = s.producer("", []string{t}, tc.checker()); return },
	)
	return c, p, err
}

func txEnd(s *scn, commit bool) (map[string]any, error) {
	tc := &txChecker{answers: []string{"COMMIT"}}
	c, p, err := s.txClients(tc)
	if err != nil {
		return nil, err
	}
	body, wait := "c", 6*time.Second
	if !commit {
		body, wait = "r", time.Duration(s.p.int("wait_ms", 6000))*time.Millisecond
	}
	tx := p.BeginTransaction()
	if _, err := p.SendWithTransaction(bg, msg(s.topic("t"), body), tx); err != nil {
		return nil, fmt.Errorf("transactional send: %w", err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.RollBack()
	}
	if err != nil {
		return nil, fmt.Errorf("end transaction: %w", err)
	}
	ids := map[string]bool{}
	received := 0
	recvErr := receiveLoop(c, defaultInvisble, time.Now().Add(wait), func(mv *rmq.MessageView, _ time.Time) bool {
		received++
		ids[mv.GetMessageId()] = true
		_ = ack(c, mv)
		return false
	})
	return map[string]any{"received": received, "checks": len(tc.snapshot()), "distinct_message_ids": len(ids),
		"receive_error": errText(recvErr)}, nil
}

func txCheck(s *scn) (map[string]any, error) {
	tc := &txChecker{answers: s.p.strs("answers")}
	c, p, err := s.txClients(tc)
	if err != nil {
		return nil, err
	}
	tx := p.BeginTransaction()
	sentAt := time.Now()
	if _, err := p.SendWithTransaction(bg, msg(s.topic("t"), "u"), tx); err != nil {
		return nil, fmt.Errorf("transactional send: %w", err)
	}
	received := 0
	handle := func(mv *rmq.MessageView, _ time.Time) bool {
		received++
		_ = ack(c, mv)
		return received >= 1
	}
	var recvErr error
	if answers := tc.answers; len(answers) > 0 && !strings.EqualFold(answers[len(answers)-1], "COMMIT") {
		// Nothing should be delivered: rather than a 25 s receive, wait (up to 25 s) for as
		// many checks as there are answers; the receive for wait_ms below still sees a
		// message that was delivered all the same (it stays there until received).
		for end := time.Now().Add(25 * time.Second); time.Now().Before(end) && len(tc.snapshot()) < len(answers); {
			time.Sleep(100 * time.Millisecond)
		}
	} else {
		recvErr = receiveLoop(c, defaultInvisble, time.Now().Add(25*time.Second), handle)
	}
	more := time.Duration(s.p.int("wait_ms", 2000)) * time.Millisecond
	err2 := receiveLoop(c, defaultInvisble, time.Now().Add(more), func(mv *rmq.MessageView, at time.Time) bool {
		handle(mv, at)
		return false
	})
	if recvErr == nil {
		recvErr = err2
	}
	calls := tc.snapshot()
	var first any
	gaps := []int64{}
	if len(calls) > 0 {
		first = ms(calls[0].Sub(sentAt))
	}
	for i := 1; i < len(calls); i++ {
		gaps = append(gaps, ms(calls[i].Sub(calls[i-1])))
	}
	return map[string]any{"received": received, "checks": len(calls), "first_check_ms": first,
		"check_gaps_ms": gaps, "receive_error": errText(recvErr)}, nil
}

// ---------------------------------------------------------------- invisibility and acks

// receiveOne waits (up to d) for the message with id (any message when id is "") without acking.
func receiveOne(c rmq.SimpleConsumer, invisible time.Duration, d time.Duration, id string) (*rmq.MessageView, time.Time, error) {
	var got *rmq.MessageView
	var when time.Time
	err := receiveLoop(c, invisible, time.Now().Add(d), func(mv *rmq.MessageView, at time.Time) bool {
		if id == "" || mv.GetMessageId() == id {
			got, when = mv, at
			return true
		}
		return false
	})
	return got, when, err
}

func neverArrived(err error) error {
	if err != nil {
		return fmt.Errorf("the message never arrived: %w", err)
	}
	return fmt.Errorf("the message never arrived within 15 s")
}

func invisibleRedelivery(s *scn) (map[string]any, error) {
	invisible := time.Duration(s.p.int("invisible_ms", 3000)) * time.Millisecond
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	r, err := send1(p, msg(s.topic("t"), "r"))
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	attempts := []int32{}
	var after any
	first, t1, err1 := receiveOne(c, invisible, 15*time.Second, r.MessageID)
	if first == nil && err1 != nil {
		return nil, fmt.Errorf("the message never arrived: %w", err1)
	}
	obs := map[string]any{"attempts": attempts, "redelivered_after_ms": nil, "receive_error": errText(err1)}
	if first == nil {
		return obs, nil
	}
	attempts = append(attempts, first.GetDeliveryAttempt())
	second, t2, err2 := receiveOne(c, defaultInvisble, 15*time.Second, r.MessageID)
	if second != nil {
		attempts = append(attempts, second.GetDeliveryAttempt())
		after = ms(t2.Sub(t1))
		obs["ack_outcome"] = outcome(ack(c, second))
	} else if err2 != nil {
		obs["receive_error"] = err2.Error()
	}
	obs["attempts"], obs["redelivered_after_ms"] = attempts, after
	return obs, nil
}

func changeInvisible(s *scn) (map[string]any, error) {
	invisible := time.Duration(s.p.int("invisible_ms", 4000)) * time.Millisecond
	changed := time.Duration(s.p.int("changed_ms", 10000)) * time.Millisecond
	watch := time.Duration(s.p.int("watch_ms", 6000)) * time.Millisecond
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	r, err := send1(p, msg(s.topic("t"), "ci"))
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	mv, _, err := receiveOne(c, invisible, 15*time.Second, r.MessageID)
	if mv == nil {
		return nil, neverArrived(err)
	}
	// The Go client updates the MessageView's receipt handle in place with the new one.
	changeErr := c.ChangeInvisibleDuration(mv, changed)
	early, _, _ := receiveOne(c, defaultInvisble, watch, r.MessageID)
	ackErr := ack(c, mv)
	return map[string]any{"redelivered_early": early != nil, "ack_ok": okOutcome(ackErr),
		"change_outcome": outcome(changeErr), "ack_outcome": outcome(ackErr)}, nil
}

func ackStaleHandle(s *scn) (map[string]any, error) {
	invisible := time.Duration(s.p.int("invisible_ms", 2000)) * time.Millisecond
	c, p, err := s.consumerAndProducer("", rmq.SUB_ALL)
	if err != nil {
		return nil, err
	}
	r, err := send1(p, msg(s.topic("t"), "st"))
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	first, _, err := receiveOne(c, invisible, 15*time.Second, r.MessageID)
	if first == nil {
		return nil, neverArrived(err)
	}
	staleHandle := first.GetReceiptHandle()
	second, _, _ := receiveOne(c, defaultInvisble, 15*time.Second, r.MessageID)
	o := outcome(ack(c, first))
	o["redelivered"] = second != nil
	if second != nil {
		o["handles_differ"] = second.GetReceiptHandle() != staleHandle
		o["second_ack"] = outcome(ack(c, second))
	}
	return o, nil
}

// ---------------------------------------------------------------- push consumers

func pushConsumer(s *scn) (map[string]any, error) {
	count := s.p.int("count", 5)
	watch := time.Duration(s.p.int("watch_ms", 3000)) * time.Millisecond
	t, g := s.topic("t"), s.group("g")
	var mu sync.Mutex
	bodies := map[string]bool{}
	deliveries := 0
	listener := func(mv *rmq.MessageView) rmq.ConsumerResult {
		mu.Lock()
		bodies[string(mv.GetBody())] = true
		deliveries++
		mu.Unlock()
		return rmq.SUCCESS
	}
	var stopPC func()
	var p rmq.Producer
	if err := par(
		func() (e error) { stopPC, e = s.push("", g, subAll(t), listener); return },
		func() (e error) { p, e = s.producer("", []string{t}, nil); return },
	); err != nil {
		return nil, err
	}
	for i := 0; i < count; i++ {
		if _, err := send1(p, msg(t, fmt.Sprintf("p%d", i))); err != nil {
			return nil, fmt.Errorf("send p%d: %w", i, err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(bodies)
		mu.Unlock()
		if n >= count {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(watch)
	stopPC()
	mu.Lock()
	defer mu.Unlock()
	var list []string
	for b := range bodies {
		list = append(list, b)
	}
	return map[string]any{"bodies": sortedStrings(list), "deliveries": deliveries}, nil
}

func pushRetryDLQ(s *scn) (map[string]any, error) {
	watch := time.Duration(s.p.int("watch_ms", 40000)) * time.Millisecond
	t, g := s.topic("t"), s.group("g")
	type attempt struct {
		at time.Time
		n  int32
	}
	var mu sync.Mutex
	var attempts []attempt
	listener := func(mv *rmq.MessageView) rmq.ConsumerResult {
		mu.Lock()
		attempts = append(attempts, attempt{time.Now(), mv.GetDeliveryAttempt()})
		mu.Unlock()
		return rmq.FAILURE
	}
	var stopPC func()
	var p rmq.Producer
	if err := par(
		func() (e error) { stopPC, e = s.push("", g, subAll(t), listener); return },
		func() (e error) { p, e = s.producer("", []string{t}, nil); return },
	); err != nil {
		return nil, err
	}
	sentAt := time.Now()
	if _, err := send1(p, msg(t, "x")); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	// Wait until the group's allowed attempts were seen and no further one came for 3 s
	// (Apache retries ~20 s after the first attempt), or until watch after the send.
	want := s.timing.int("max_delivery_attempts", 2)
	lastChange, lastLen := sentAt, 0
	for time.Since(sentAt) < watch {
		mu.Lock()
		n := len(attempts)
		mu.Unlock()
		if n != lastLen {
			lastChange, lastLen = time.Now(), n
		} else if n >= want && time.Since(lastChange) > 3*time.Second {
			break // an attempt beyond the limit would have come by now
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopPC()
	mu.Lock()
	seen := []int32{}
	var gap any
	for _, a := range attempts {
		seen = append(seen, a.n)
	}
	if len(attempts) >= 2 {
		gap = ms(attempts[1].at.Sub(attempts[0].at))
	}
	mu.Unlock()

	// The dead-letter queue: topic %DLQ%<group>, read by another group. Apache moves the
	// message there up to ~30 s after the last attempt, so read until 85 s after the send
	// (at least 15 s). The DLQ topic's route exists only once something was dead-lettered,
	// so the consumer's start is retried until then.
	dlqTopic := "%DLQ%" + g
	deadline := sentAt.Add(85 * time.Second)
	if atLeast := time.Now().Add(15 * time.Second); deadline.Before(atLeast) {
		deadline = atLeast
	}
	if limit := s.budget.Add(-2 * time.Second); deadline.After(limit) {
		deadline = limit // never past the scenario's own limit
	}
	var dc rmq.SimpleConsumer
	var startErr error
	for time.Now().Before(deadline) {
		if dc, startErr = s.simple("", g+"-dlq", subAll(dlqTopic)); startErr == nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	dlqBodies := []string{}
	var recvErr error
	if dc != nil {
		// Stop one empty long poll after the message came (a second copy would show up
		// there), else at the deadline. A poll lasts up to receiveCallMin, so the last one
		// starts just before the deadline minus that and still covers up to the deadline.
		for time.Now().Add(receiveCallMin).Before(deadline.Add(time.Second)) {
			n := len(dlqBodies)
			err := receiveLoop(dc, defaultInvisble, time.Now().Add(awaitDuration), func(mv *rmq.MessageView, _ time.Time) bool {
				dlqBodies = append(dlqBodies, string(mv.GetBody()))
				_ = ack(dc, mv)
				return false
			})
			if err != nil {
				recvErr = err
			}
			if n > 0 && len(dlqBodies) == n {
				break
			}
		}
	}
	var dlq any
	if len(dlqBodies) > 0 {
		dlq = "%DLQ%g"
	}
	return map[string]any{"attempts": seen, "retry_gap_ms": gap, "dlq_topic": dlq,
		"dlq_bodies": sortedStrings(dlqBodies), "dlq_start_error": errText(startErr),
		"dlq_receive_error": errText(recvErr)}, nil
}

// ---------------------------------------------------------------- refusals

func badInput(s *scn) (map[string]any, error) {
	t := s.topic("t")
	p, err := s.producer("", []string{t}, nil)
	if err != nil {
		return nil, err
	}
	cases := map[string]any{}
	for _, name := range s.p.strs("cases") {
		m := msg(t, "bad-"+name)
		switch name {
		case "reserved_property":
			m.AddProperty("UNIQ_KEY", "x")
		case "body_5mib":
			m.Body = []byte(strings.Repeat("x", 5*1024*1024))
		case "bad_topic_name":
			m.Topic = "bad topic!"
		case "missing_topic":
			m.Topic = t + "-missing"
		case "bad_tag":
			m.SetTag("a|b")
		default:
			cases[name] = map[string]any{"outcome": "error", "code": nil, "side": nil, "message": "unknown case"}
			continue
		}
		_, err := send1(p, m)
		cases[name] = outcome(err)
	}
	return map[string]any{"cases": cases}, nil
}

func messageTypeMismatch(s *scn) (map[string]any, error) {
	normal, fifo, txTopic := s.topic("normal"), s.topic("fifo"), s.topic("tx")
	tc := &txChecker{answers: []string{"COMMIT"}}
	// One producer per case, so that no case is influenced by what an earlier one left
	// (the Go producer isolates an endpoint after a failed send).
	newProducer := func(topic string, tx bool) (rmq.Producer, error) {
		if tx {
			return s.producer("", []string{topic}, tc.checker())
		}
		return s.producer("", []string{topic}, nil)
	}
	cases := map[string]any{}
	for _, name := range s.p.strs("cases") {
		var err error
		switch name {
		case "fifo_to_normal":
			err = sendWith(newProducer, normal, false, func(m *rmq.Message) { m.SetMessageGroup("mg") })
		case "tx_to_normal":
			err = sendWith(newProducer, normal, true, nil)
		case "delay_to_normal":
			err = sendWith(newProducer, normal, false, func(m *rmq.Message) { m.SetDelayTimestamp(time.Now().Add(time.Second)) })
		case "normal_to_fifo":
			err = sendWith(newProducer, fifo, false, nil)
		case "normal_to_tx":
			err = sendWith(newProducer, txTopic, false, nil)
		default:
			cases[name] = map[string]any{"outcome": "error", "code": nil, "side": nil, "message": "unknown case"}
			continue
		}
		if se, ok := err.(startError); ok {
			return nil, se.err
		}
		cases[name] = outcome(err)
	}
	return map[string]any{"cases": cases}, nil
}

type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }

// sendWith starts a producer for topic and sends one message (transactionally when tx, then
// commits if the send was accepted); a failure to start the producer is a startError.
func sendWith(newProducer func(string, bool) (rmq.Producer, error), topic string, tx bool, shape func(*rmq.Message)) error {
	p, err := newProducer(topic, tx)
	if err != nil {
		return startError{err}
	}
	m := msg(topic, "mismatch")
	if shape != nil {
		shape(m)
	}
	if !tx {
		_, err = send1(p, m)
		return err
	}
	t := p.BeginTransaction()
	if _, err := p.SendWithTransaction(bg, m, t); err != nil {
		return err
	}
	return t.Commit()
}

// ---------------------------------------------------------------- namespaces

func namespaceIsolation(s *scn) (map[string]any, error) {
	namespaces := s.p.strs("namespaces")
	t, g := s.topic("t"), s.group("g")
	consumers := make([]rmq.SimpleConsumer, len(namespaces))
	producers := make([]rmq.Producer, len(namespaces))
	var starts []func() error
	for i, ns := range namespaces {
		i, ns := i, ns
		starts = append(starts,
			func() (e error) { consumers[i], e = s.simple(ns, g, subAll(t)); return },
			func() (e error) { producers[i], e = s.producer(ns, []string{t}, nil); return })
	}
	if err := par(starts...); err != nil {
		return nil, err
	}
	sendErrors := map[string]any{}
	for i, ns := range namespaces {
		label := ns
		if label == "" {
			label = "none"
		}
		if _, err := send1(producers[i], msg(t, "ns-"+label)); err != nil {
			sendErrors[ns] = outcome(err)
		}
	}
	received := map[string][]string{}
	recvErrors := map[string]any{}
	var mu sync.Mutex
	var recv []func() error
	for i, ns := range namespaces {
		i, ns := i, ns
		recv = append(recv, func() error {
			bodies, err := receiveBodies(consumers[i], 6*time.Second)
			mu.Lock()
			received[ns] = sortedStrings(bodies)
			if err != nil {
				recvErrors[ns] = err.Error()
			}
			mu.Unlock()
			return nil
		})
	}
	_ = par(recv...)
	return map[string]any{"received": received, "send_errors": sendErrors, "receive_errors": recvErrors}, nil
}

// ---------------------------------------------------------------- priority and lite

// refusedAtStart: the Go producer resolves its topics' routes in Start (it cannot start
// without), so a server refusing the topic (e.g. TOPIC_NOT_FOUND for a type the broker
// lacks) shows there rather than at the send; that outcome stands for the send's (and
// "send_stage" says so).
func refusedAtStart(err error) (map[string]any, bool) {
	o := outcome(err)
	if o["side"] != "server" || o["code"] == nil {
		return nil, false
	}
	return o, true
}

func priority(s *scn) (map[string]any, error) {
	t, g := s.topic("t"), s.group("g")
	p, err := s.producer("", []string{t}, nil)
	if err != nil {
		o, refused := refusedAtStart(err)
		if !refused {
			return nil, err
		}
		return map[string]any{"send_outcome": o, "send_stage": "producer_start", "received_priorities": []any{}, "sent": 0}, nil
	}
	var firstOutcome map[string]any
	sent := 0
	for _, pr := range s.p.ints("priorities") {
		m := msg(t, fmt.Sprintf("pr%d", pr))
		err := m.SetPriority(int32(pr))
		if err == nil {
			_, err = send1(p, m)
		}
		if firstOutcome == nil {
			firstOutcome = outcome(err)
		}
		if err != nil {
			break
		}
		sent++
	}
	c, err := s.simple("", g, subAll(t))
	if err != nil {
		return nil, err
	}
	got := []any{}
	source := "wire"
	recvErr := receiveLoop(c, defaultInvisble, time.Now().Add(6*time.Second), func(mv *rmq.MessageView, _ time.Time) bool {
		// The MessageView has no priority getter: the priority the server sent with the
		// message (seen on the wire), else the one the body names.
		if v, ok := prioWire.Load(mv.GetMessageId()); ok {
			got = append(got, int(v.(int32)))
		} else if n, err := strconv.Atoi(strings.TrimPrefix(string(mv.GetBody()), "pr")); err == nil {
			got = append(got, n)
			source = "body"
		}
		_ = ack(c, mv)
		return false
	})
	return map[string]any{"send_outcome": firstOutcome, "received_priorities": got, "sent": sent,
		"priority_source": source, "receive_error": errText(recvErr)}, nil
}

func lite(s *scn) (map[string]any, error) {
	t, g, lt := s.topic("t"), s.group("g"), s.p.str("lite_topic", "lt1")
	var mu sync.Mutex
	received := 0
	listener := func(mv *rmq.MessageView) rmq.ConsumerResult {
		mu.Lock()
		received++
		mu.Unlock()
		return rmq.SUCCESS
	}
	// The consumer first (its failure is an observation, not the runner's), then the send.
	lpc, err := rmq.NewLitePushConsumer(s.config("", g), rmq.NewLitePushConsumerConfig(t, defaultInvisble),
		pushOpts(map[string]*rmq.FilterExpression{}, listener)...)
	if err != nil {
		return nil, fmt.Errorf("NewLitePushConsumer: %w", err)
	}
	lpc.SetRequestTimeout(requestTimeout)
	var once sync.Once
	stop := func() { once.Do(func() { s.stopPush(lpc, g) }) }
	s.tr.addCloser(stop)
	consumerErr := startBounded("lite push consumer", lpc.Start)
	stage := "start"
	if consumerErr == nil {
		stage = "subscribe_lite"
		consumerErr = lpc.SubscribeLite(lt)
	}
	co := outcome(consumerErr)
	co["stage"] = stage

	var so map[string]any
	stageSend := "send"
	if p, err := s.producer("", []string{t}, nil); err == nil {
		m := msg(t, "lite")
		m.SetLiteTopic(lt)
		_, sendErr := send1(p, m)
		so = outcome(sendErr)
	} else if o, refused := refusedAtStart(err); refused {
		so, stageSend = o, "producer_start"
	} else {
		return nil, err
	}
	time.Sleep(8 * time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	return map[string]any{"send_outcome": so, "send_stage": stageSend, "received": received, "consumer_outcome": co}, nil
}
