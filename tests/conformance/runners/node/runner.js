// Conformance runner for the official Node.js client (npm rocketmq-client-nodejs).
// Contract: tests/conformance/README.md. Usage: node runner.js INPUT.json OUTPUT.json
// (run.sh sets NODE_PATH to the installed client). The client's own logs go to
// OUTPUT.json.client.log (or $RUNNER_CLIENT_LOG); this runner's progress goes to
// stderr; stdout stays empty.
'use strict';

const fs = require('fs');
const util = require('util');

const rmq = require('rocketmq-client-nodejs');
const {
  Producer, SimpleConsumer, PushConsumer, LitePushConsumerBuilder, LitePushConsumerImpl,
  ConsumeResult, FilterExpression, ClientException,
} = rmq;
const { FilterType, TransactionResolution } =
  require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const CLIENT_VERSION = require('rocketmq-client-nodejs/package.json').version;

const REQUEST_TIMEOUT_MS = 10000;
const AWAIT_MS = 2000; // long-polling await of the consumers
const SCENARIO_LIMIT_MS = 85000; // closing the scenario's clients comes on top (README: 90 s in all)
const STARTUP_LIMIT_MS = 20000; // a client's startup() waits for the broker's settings
// A push consumer's shutdown() waits for its in-flight long poll (up to the
// request timeout plus the long-polling timeout the broker's settings gave it).
// A scenario waits this long for a shutdown; a longer one goes on in the
// background and the run waits for it (BACKGROUND_LIMIT_MS) after writing OUTPUT.
const SHUTDOWN_LIMIT_MS = 15000;
const BACKGROUND_LIMIT_MS = 60000;
const backgroundShutdowns = new Set();

const [inputPath, outputPath] = process.argv.slice(2);
if (!inputPath || !outputPath) {
  process.stderr.write('usage: node runner.js INPUT.json OUTPUT.json\n');
  process.exit(2);
}

// ---------------------------------------------------------------- logging

const logPath = process.env.RUNNER_CLIENT_LOG || `${outputPath}.client.log`;
const logStream = fs.createWriteStream(logPath, { flags: 'w' });
function logLine(level, args) {
  logStream.write(`${new Date().toISOString()} ${level} ${util.format(...args)}\n`);
}
// One logger shared by every client; no close(), as each client's shutdown()
// would close it for all.
const clientLogger = {
  info: (...a) => logLine('INFO', a),
  warn: (...a) => logLine('WARN', a),
  error: (...a) => logLine('ERROR', a),
  // Transaction.commit() calls logger.debug unguarded: it must exist.
  debug: process.env.RUNNER_CLIENT_DEBUG ? (...a) => logLine('DEBUG', a) : () => {},
};
// 1.0.8's consume services (Standard/Fifo/Lite*ConsumeService) ignore the
// client's logger and each make a default egg-logger writing to
// ~/logs/rocketmq/, whose 1 s flush interval is never closed and keeps the
// process alive after every client is shut down. Hand them this logger.
require('rocketmq-client-nodejs/dist/client/Logger').getDefaultLogger = () => clientLogger;

function note(...args) {
  const line = util.format(...args);
  process.stderr.write(`[node-runner] ${line}\n`);
  logLine('RUNNER', [ line ]);
}

// ---------------------------------------------------------------- helpers

const sleep = ms => new Promise(r => setTimeout(r, ms));

class Timeout extends Error {
  constructor(what, ms) {
    super(`timed out after ${ms} ms: ${what}`);
    this.name = 'Timeout';
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Timeout(what, ms)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

function errText(err) {
  if (!err) return String(err);
  let text = `${err.name || 'Error'}: ${err.message}`;
  for (let c = err.cause, depth = 0; c && depth < 5; c = c.cause, depth++) {
    text += ` <- ${c.name || 'Error'}: ${c.message}`;
  }
  return text;
}

// gRPC status codes under which the client itself gave up (no answer from the server).
const GRPC_CLIENT_SIDE = new Set([ 1 /* CANCELLED */, 4 /* DEADLINE_EXCEEDED */, 14 /* UNAVAILABLE */ ]);

// An outcome object (README "An outcome"): ok, or who refused and the RocketMQ Code.
function outcomeOf(err) {
  if (!err) return { outcome: 'ok', code: null, side: null, message: null };
  const message = errText(err);
  for (let e = err, depth = 0; e && depth < 6; e = e.cause, depth++) {
    // The client's ClientException subclasses carry the response status's
    // apache.rocketmq.v2.Code in `code` (StatusChecker); the client also
    // throws ClientException(500, ...) itself (lite subscription checks).
    if (e instanceof ClientException || e.name === 'ClientException') {
      if (typeof e.code === 'number' && e.code >= 10000) {
        return { outcome: 'error', code: e.code, side: 'server', message };
      }
      return { outcome: 'error', code: null, side: 'client', message };
    }
    // A gRPC-level failure (grpc-js ServiceError: numeric code, details, metadata).
    if (typeof e.code === 'number' && 'details' in e && 'metadata' in e) {
      const side = GRPC_CLIENT_SIDE.has(e.code) ? 'client' : 'server';
      return { outcome: 'error', code: null, side, message: `gRPC status ${e.code}: ${message}` };
    }
  }
  return { outcome: 'error', code: null, side: 'client', message };
}

async function attempt(fn) {
  try {
    const value = await fn();
    return { ...outcomeOf(null), value };
  } catch (err) {
    return outcomeOf(err);
  }
}

function stripValue(o) {
  const { value, ...rest } = o; // eslint-disable-line no-unused-vars
  return rest;
}

const body = m => m.body.toString('utf8');
const orNull = v => (v === undefined || v === null || v === '' ? null : v);
const sortStrings = a => a.slice().sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));

// ---------------------------------------------------------------- scenario context

class Ctx {
  constructor(input, sc) {
    this.endpoint = input.endpoint;
    this.sc = sc;
    this.topics = sc.topics || {};
    this.groups = sc.groups || {};
    this.params = sc.params || {};
    this.timing = sc.timing || {};
    this.clients = [];
    this.closed = false;
    this.startedAt = Date.now();
  }

  options(namespace) {
    return {
      endpoints: this.endpoint,
      namespace: namespace || '',
      requestTimeout: REQUEST_TIMEOUT_MS,
      sslEnabled: false,
      logger: clientLogger,
    };
  }

  track(client, kind) {
    this.clients.push({ client, kind });
    return client;
  }

  async start(client, kind) {
    this.track(client, kind);
    await withTimeout(client.startup(), STARTUP_LIMIT_MS, `${kind} startup`);
    if (this.closed) throw new Error('scenario already finished');
    return client;
  }

  async producer({ topics = [], checker, namespace } = {}) {
    // Only the first topic is declared: 1.0.8's startup() queries the declared
    // topics' routes one after another and then waits for the broker's first
    // settings, which answer the first query's telemetry session; with more
    // than one topic the settings can arrive before the wait begins and
    // startup() never returns. Other topics' routes are fetched at first send.
    const p = new Producer({ ...this.options(namespace), topics: topics.slice(0, 1), checker });
    return this.start(p, 'producer');
  }

  async simpleConsumer(group, topic, expression = '*', { namespace } = {}) {
    const c = new SimpleConsumer({
      ...this.options(namespace),
      consumerGroup: group,
      awaitDuration: AWAIT_MS,
      subscriptions: new Map([[ topic, expression ]]),
    });
    return this.start(c, 'simple consumer');
  }

  // A SimpleConsumer whose startup is retried (each failed client shut down)
  // until it succeeds or until the time untilMs; the last failure is thrown.
  async simpleConsumerRetrying(group, topic, expression, untilMs) {
    for (;;) {
      const before = this.clients.length;
      try {
        return await this.simpleConsumer(group, topic, expression);
      } catch (err) {
        const failed = this.clients.length > before ? this.clients[this.clients.length - 1].client : null;
        if (failed) await this.shutdown(failed, 2000);
        if (this.closed || Date.now() + 2000 > untilMs) throw err;
        await sleep(1000);
      }
    }
  }

  async pushConsumer(group, topic, consume, { expression = '*', namespace } = {}) {
    const c = new PushConsumer({
      ...this.options(namespace),
      consumerGroup: group,
      subscriptions: new Map([[ topic, expression ]]),
      // Accepted by the options type, but 1.0.8 does not hand it to its
      // settings: the push consumer long-polls as the broker's settings say.
      longPollingTimeout: AWAIT_MS,
      messageListener: { consume },
    });
    return this.start(c, 'push consumer');
  }

  // limitMs: how long the scenario waits for the shutdown before letting it
  // finish in the background.
  async shutdown(client, limitMs = SHUTDOWN_LIMIT_MS) {
    const i = this.clients.findIndex(e => e.client === client);
    if (i < 0) return;
    const [{ kind }] = this.clients.splice(i, 1);
    await this.#shutdownOne(client, kind, limitMs);
  }

  async #shutdownOne(client, kind, limitMs = SHUTDOWN_LIMIT_MS) {
    const t0 = Date.now();
    const id = this.sc.id;
    const done = client.shutdown().then(
      () => {
        const took = Date.now() - t0;
        if (took > 5000) note('%s: %s shutdown took %d ms', id, kind, took);
      },
      err => note('%s: %s shutdown failed: %s', id, kind, errText(err)));
    try {
      await withTimeout(done, limitMs, `${kind} shutdown`);
    } catch (err) {
      note('%s: %s shutdown still running after %d ms; it goes on in the background', id, kind, limitMs);
      backgroundShutdowns.add(done);
      done.finally(() => backgroundShutdowns.delete(done));
    }
  }

  async closeAll() {
    this.closed = true;
    while (this.clients.length) {
      const { client, kind } = this.clients.pop();
      await this.#shutdownOne(client, kind);
    }
  }
}

// Receive batches of up to 16 until `want` messages or the deadline; ack each
// as it comes unless ack is false. Returns [{ m, at }] in arrival order.
async function receiveUntil(consumer, { want = Infinity, ms, invisibleMs = 20000, ack = true } = {}) {
  const got = [];
  const end = Date.now() + ms;
  while (got.length < want && Date.now() < end) {
    if (!consumer.isRunning()) throw new Error('the consumer was shut down');
    const batch = await consumer.receive(16, invisibleMs);
    const at = Date.now();
    for (const m of batch) {
      got.push({ m, at });
      if (ack) await consumer.ack(m);
    }
  }
  return got;
}

// ---------------------------------------------------------------- scenarios

const scenarios = {};

scenarios.send_receive = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const count = ctx.params.count ?? 5;
  const tag = ctx.params.tag ?? 'TagA';
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  const receipts = [];
  for (let i = 0; i < count; i++) {
    const r = await producer.send({
      topic: t, tag, keys: [ `k-${i}`, `x-${i}` ],
      properties: new Map([[ 'p1', `v${i}` ], [ 'p2', 'x' ]]),
      body: Buffer.from(`m${i}`),
    });
    if (r && r.messageId) receipts.push(r.messageId);
  }
  const got = await receiveUntil(consumer, { want: count, ms: 15000 });
  const roleOf = name => Object.keys(ctx.topics).find(k => ctx.topics[k] === name) ?? name;
  const messages = got.map(({ m }) => ({
    body: body(m),
    tag: orNull(m.tag),
    keys: sortStrings(m.keys || []),
    properties: Object.fromEntries(m.properties),
    topic: roleOf(m.topic),
    delivery_attempt: m.deliveryAttempt ?? null,
    message_group: orNull(m.messageGroup),
  })).sort((a, b) => (a.body < b.body ? -1 : a.body > b.body ? 1 : 0));
  const receivedIds = sortStrings(got.map(({ m }) => m.messageId));
  const sentIds = sortStrings(receipts);
  const ids_unique = new Set(receipts).size === receipts.length &&
    JSON.stringify(sentIds) === JSON.stringify(receivedIds);
  return { send_ok: receipts.length, messages, ids_unique };
};

scenarios.tag_filter = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const tags = ctx.params.tags;
  const consumer = await ctx.simpleConsumer(g, t, ctx.params.expression);
  const producer = await ctx.producer({ topics: [ t ] });
  for (let i = 0; i < tags.length; i++) {
    await producer.send({ topic: t, tag: tags[i], body: Buffer.from(`${i}-${tags[i]}`) });
  }
  const got = await receiveUntil(consumer, { ms: 6000 });
  return { bodies: sortStrings(got.map(({ m }) => body(m))) };
};

scenarios.sql_filter = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const count = ctx.params.count ?? 6;
  const consumer = await ctx.simpleConsumer(g, t, new FilterExpression(ctx.params.expression, FilterType.SQL));
  const producer = await ctx.producer({ topics: [ t ] });
  for (let i = 0; i < count; i++) {
    await producer.send({
      topic: t, tag: i % 2 === 1 ? 'A' : 'B',
      properties: new Map([[ 'n', String(i) ]]), body: Buffer.from(`s${i}`),
    });
  }
  const got = await receiveUntil(consumer, { ms: 6000 });
  return { bodies: sortStrings(got.map(({ m }) => body(m))) };
};

scenarios.sql_filter_malformed = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const filter = new FilterExpression(ctx.params.expression, FilterType.SQL);
  const started = await attempt(() => ctx.simpleConsumer(g, t, filter));
  if (started.outcome !== 'ok') return { ...stripValue(started), stage: 'startup' };
  const received = await attempt(async () => {
    const batch = await started.value.receive(16, 20000);
    for (const m of batch) await started.value.ack(m);
    return batch.length;
  });
  return { ...stripValue(received), stage: 'receive' };
};

scenarios.fifo_order = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const groups = ctx.params.groups ?? 3;
  const perGroup = ctx.params.per_group ?? 8;
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  const sent = {};
  for (let j = 0; j < groups; j++) sent[`g${j}`] = [];
  for (let i = 0; i < perGroup; i++) {
    for (let j = 0; j < groups; j++) {
      const b = `g${j}-${i}`;
      await producer.send({ topic: t, messageGroup: `g${j}`, body: Buffer.from(b) });
      sent[`g${j}`].push(b);
    }
  }
  const got = await receiveUntil(consumer, { want: groups * perGroup, ms: 30000 });
  const arrived = {};
  for (const name of Object.keys(sent)) arrived[name] = [];
  const seenGroups = new Set();
  for (const { m } of got) {
    const b = body(m);
    seenGroups.add(orNull(m.messageGroup));
    const name = b.split('-')[0];
    (arrived[name] = arrived[name] || []).push(b);
  }
  // A group's order is kept when what arrived of it is exactly the start of
  // what was sent to it (no gap, no duplicate, no reordering).
  const order_kept = {};
  for (const name of Object.keys(arrived)) {
    const want = sent[name] || [];
    order_kept[name] = arrived[name].every((b, k) => want[k] === b);
  }
  const message_groups = Array.from(seenGroups)
    .sort((a, b) => (a === null ? -1 : b === null ? 1 : a < b ? -1 : a > b ? 1 : 0));
  return { received: got.length, order_kept, message_groups };
};

scenarios.fifo_redelivery = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const count = ctx.params.count ?? 4;
  const invisibleMs = ctx.params.invisible_ms ?? 3000;
  const a = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  for (let i = 0; i < count; i++) {
    await producer.send({ topic: t, messageGroup: 'm', body: Buffer.from(`f${i}`) });
  }
  // A: one batch (the first receive that returns something), never acked; then A dies.
  const first = await receiveUntil(a, { want: 1, ms: 15000, invisibleMs, ack: false });
  const aAt = first.length ? first[0].at : null;
  await ctx.shutdown(a);
  const b = await ctx.simpleConsumer(g, t, '*');
  const got = [];
  const bodies = new Set();
  const end = Date.now() + 25000;
  while (bodies.size < count && Date.now() < end) {
    if (!b.isRunning()) throw new Error('the consumer was shut down');
    const batch = await b.receive(16, 20000);
    const at = Date.now();
    for (const m of batch) {
      got.push({ m, at });
      bodies.add(body(m));
      await b.ack(m);
    }
  }
  return {
    a_bodies: first.map(({ m }) => body(m)),
    b_bodies: got.map(({ m }) => body(m)),
    b_attempts: got.map(({ m }) => m.deliveryAttempt ?? null),
    redelivered_after_ms: got.length && aAt !== null ? got[0].at - aAt : null,
  };
};

scenarios.delay_timestamp = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const delays = ctx.params.delays_ms ?? [ 2000, 4000, 6000 ];
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  const due = {};
  for (let i = 0; i < delays.length; i++) {
    const when = Date.now() + delays[i];
    due[`d${i}`] = when;
    await producer.send({ topic: t, deliveryTimestamp: new Date(when), body: Buffer.from(`d${i}`) });
  }
  const got = await receiveUntil(consumer, { want: delays.length, ms: 20000 });
  const arrival = {};
  for (const { m, at } of got) {
    const b = body(m);
    if (!(b in arrival)) arrival[b] = at;
  }
  const lateness_ms = delays.map((_, i) => (`d${i}` in arrival ? arrival[`d${i}`] - due[`d${i}`] : null));
  return { received: got.length, lateness_ms };
};

scenarios.delay_too_far = async ctx => {
  const { t } = ctx.topics;
  const producer = await ctx.producer({ topics: [ t ] });
  const res = await attempt(() => producer.send({
    topic: t, deliveryTimestamp: new Date(Date.now() + ctx.params.delay_ms), body: Buffer.from('far'),
  }));
  return stripValue(res);
};

const RESOLUTIONS = {
  COMMIT: TransactionResolution.COMMIT,
  ROLLBACK: TransactionResolution.ROLLBACK,
  UNKNOWN: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
};

function makeChecker(answers) {
  const calls = [];
  return {
    calls,
    checker: {
      async check() {
        const k = calls.length;
        calls.push(Date.now());
        const answer = answers[Math.min(k, answers.length - 1)];
        return RESOLUTIONS[answer];
      },
    },
  };
}

async function txEnded(ctx, end, receiveMs) {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const { calls, checker } = makeChecker([ 'COMMIT' ]);
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ], checker });
  const tx = producer.beginTransaction();
  await producer.send({ topic: t, body: Buffer.from(end === 'commit' ? 'c' : 'r') }, tx);
  if (end === 'commit') await tx.commit();
  else await tx.rollback();
  const got = await receiveUntil(consumer, { ms: receiveMs });
  return { received: got.length, checks: calls.length };
}

scenarios.tx_commit = ctx => txEnded(ctx, 'commit', 6000);
scenarios.tx_rollback = ctx => txEnded(ctx, 'rollback', ctx.params.wait_ms ?? 6000);

async function txCheck(ctx) {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const answers = ctx.params.answers && ctx.params.answers.length ? ctx.params.answers : [ 'COMMIT' ];
  for (const a of answers) if (!(a in RESOLUTIONS)) throw new Error(`unknown checker answer ${a}`);
  const { calls, checker } = makeChecker(answers);
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ], checker });
  const tx = producer.beginTransaction();
  const sentAt = Date.now();
  await producer.send({ topic: t, body: Buffer.from('u') }, tx);
  const got = await receiveUntil(consumer, { want: 1, ms: 25000 });
  got.push(...await receiveUntil(consumer, { ms: ctx.params.wait_ms ?? 2000 }));
  const gaps = [];
  for (let k = 1; k < calls.length; k++) gaps.push(calls[k] - calls[k - 1]);
  return {
    received: got.length,
    checks: calls.length,
    first_check_ms: calls.length ? calls[0] - sentAt : null,
    check_gaps_ms: gaps,
  };
}

scenarios.invisible_redelivery = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const invisibleMs = ctx.params.invisible_ms ?? 3000;
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  await producer.send({ topic: t, body: Buffer.from('r') });
  const first = await receiveUntil(consumer, { want: 1, ms: 15000, invisibleMs, ack: false });
  if (!first.length) return { attempts: [], redelivered_after_ms: null };
  const attempts = first.map(({ m }) => m.deliveryAttempt ?? null);
  const t1 = first[0].at;
  const again = await receiveUntil(consumer, { want: 1, ms: 15000, ack: true });
  attempts.push(...again.map(({ m }) => m.deliveryAttempt ?? null));
  return { attempts, redelivered_after_ms: again.length ? again[0].at - t1 : null };
};

scenarios.change_invisible = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const { invisible_ms: invisibleMs = 4000, changed_ms: changedMs = 10000, watch_ms: watchMs = 6000 } = ctx.params;
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  await producer.send({ topic: t, body: Buffer.from('ci') });
  const first = await receiveUntil(consumer, { want: 1, ms: 15000, invisibleMs, ack: false });
  if (!first.length) throw new Error('the message did not arrive within 15 s');
  const msg = first[0].m;
  const handleBefore = msg.receiptHandle;
  // The client updates the message's receipt handle in place.
  const change = await attempt(() => consumer.changeInvisibleDuration(msg, changedMs));
  const handleChanged = msg.receiptHandle !== handleBefore;
  // Watch for watch_ms by the clock and ack at its end: a broker may hold a
  // long poll past the 2 s asked for, and the ack must not wait for it.
  const watchEnd = Date.now() + watchMs;
  const watching = receiveUntil(consumer, { ms: watchMs, ack: false }).then(v => ({ v }), e => ({ e }));
  await sleep(Math.max(0, watchEnd - Date.now()));
  const ack = await attempt(() => consumer.ack(msg));
  const ackedAt = Date.now();
  const { v: watched, e: watchError } = await watching;
  if (watchError) throw watchError;
  const again = watched.filter(({ m, at }) => m.messageId === msg.messageId && at <= ackedAt);
  return {
    redelivered_early: again.length > 0,
    ack_ok: ack.outcome === 'ok',
    change_outcome: stripValue(change),
    handle_changed: handleChanged,
    ack_outcome: stripValue(ack),
  };
};

scenarios.ack_stale_handle = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const invisibleMs = ctx.params.invisible_ms ?? 2000;
  const consumer = await ctx.simpleConsumer(g, t, '*');
  const producer = await ctx.producer({ topics: [ t ] });
  await producer.send({ topic: t, body: Buffer.from('st') });
  const first = await receiveUntil(consumer, { want: 1, ms: 15000, invisibleMs, ack: false });
  if (!first.length) throw new Error('the message did not arrive within 15 s');
  const again = await receiveUntil(consumer, { want: 1, ms: 15000, ack: false });
  const stale = await attempt(() => consumer.ack(first[0].m));
  const fresh = again.length ? stripValue(await attempt(() => consumer.ack(again[0].m))) : null;
  return { ...stripValue(stale), redelivered: again.length > 0, second_ack: fresh };
};

scenarios.push_consumer = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const count = ctx.params.count ?? 5;
  const watchMs = ctx.params.watch_ms ?? 3000;
  const seen = [];
  const consumer = await ctx.pushConsumer(g, t, m => {
    seen.push(body(m));
    return ConsumeResult.SUCCESS;
  });
  const producer = await ctx.producer({ topics: [ t ] });
  const want = new Set();
  for (let i = 0; i < count; i++) {
    await producer.send({ topic: t, body: Buffer.from(`p${i}`) });
    want.add(`p${i}`);
  }
  const end = Date.now() + 15000;
  while (Date.now() < end && !ctx.closed && ![ ...want ].every(b => seen.includes(b))) await sleep(100);
  await sleep(watchMs);
  // What was seen is settled; the shutdown (which waits for the in-flight long
  // poll) may finish in the background.
  await ctx.shutdown(consumer, 3000);
  return { bodies: sortStrings([ ...new Set(seen) ]), deliveries: seen.length };
};

scenarios.push_retry_dlq = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const watchMs = ctx.params.watch_ms ?? 40000;
  const calls = [];
  const consumer = await ctx.pushConsumer(g, t, m => {
    calls.push({ at: Date.now(), attempt: m.deliveryAttempt ?? null, body: body(m) });
    return ConsumeResult.FAILURE;
  });
  const producer = await ctx.producer({ topics: [ t ] });
  const sentAt = Date.now();
  await producer.send({ topic: t, body: Buffer.from('x') });
  // Until the group's allowed attempts (timing.max_delivery_attempts) were seen
  // and no further one came for 3 s (Apache retries ~20 s after the first
  // attempt), or watch_ms after the send.
  const want = ctx.timing.max_delivery_attempts ?? 2;
  while (Date.now() - sentAt < watchMs && !ctx.closed) {
    if (calls.length >= want && Date.now() - calls[calls.length - 1].at > 3000) break;
    await sleep(200);
  }
  const seen = calls.slice();
  // The attempts are settled; a shutdown still waiting for its in-flight long
  // poll may finish in the background.
  await ctx.shutdown(consumer, 5000);
  const observed = {
    attempts: seen.map(c => c.attempt),
    retry_gap_ms: seen.length >= 2 ? seen[1].at - seen[0].at : null,
    dlq_topic: null,
    dlq_bodies: [],
  };
  // The dead-letter queue, read by another group until the message arrives or
  // 85 s after the send (at least 15 s): Apache moves the message there up to
  // ~30 s after the last attempt. Its route exists only once something was
  // dead-lettered (before that the consumer's startup fails), so the start is
  // retried until then. Never past the scenario's own limit.
  const dlqTopic = `%DLQ%${g}`;
  let readUntil = Math.max(sentAt + 85000, Date.now() + 15000);
  readUntil = Math.min(readUntil, ctx.startedAt + SCENARIO_LIMIT_MS - 2000);
  const dlq = await attempt(async () => {
    const reader = await ctx.simpleConsumerRetrying(`${g}-dlq`, dlqTopic, '*', readUntil);
    return receiveUntil(reader, { want: 1, ms: Math.max(0, readUntil - Date.now()) });
  });
  if (dlq.outcome === 'ok') {
    observed.dlq_bodies = sortStrings(dlq.value.map(({ m }) => body(m)));
    if (dlq.value.length) observed.dlq_topic = '%DLQ%g';
  } else {
    observed.dlq_read = stripValue(dlq);
  }
  return observed;
};

scenarios.bad_input = async ctx => {
  const { t } = ctx.topics;
  const producer = await ctx.producer({ topics: [ t ] });
  const sends = {
    reserved_property: () => producer.send({
      topic: t, properties: new Map([[ 'UNIQ_KEY', 'x' ]]), body: Buffer.from('b'),
    }),
    body_5mib: () => producer.send({ topic: t, body: Buffer.alloc(5 * 1024 * 1024, 0x61) }),
    bad_topic_name: () => producer.send({ topic: 'bad topic!', body: Buffer.from('b') }),
    missing_topic: () => producer.send({ topic: `${t}-missing`, body: Buffer.from('b') }),
    bad_tag: () => producer.send({ topic: t, tag: 'a|b', body: Buffer.from('b') }),
  };
  const cases = {};
  for (const name of ctx.params.cases || Object.keys(sends)) {
    if (!sends[name]) throw new Error(`unknown bad_input case ${name}`);
    cases[name] = stripValue(await attempt(sends[name]));
  }
  return { cases };
};

scenarios.namespace_isolation = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const namespaces = ctx.params.namespaces ?? [ 'nsA', 'nsB', '' ];
  const consumers = {};
  for (const ns of namespaces) consumers[ns] = await ctx.simpleConsumer(g, t, '*', { namespace: ns });
  for (const ns of namespaces) {
    const producer = await ctx.producer({ topics: [ t ], namespace: ns });
    await producer.send({ topic: t, body: Buffer.from(`ns-${ns || 'none'}`) });
    await ctx.shutdown(producer);
  }
  const received = {};
  await Promise.all(namespaces.map(async ns => {
    const got = await receiveUntil(consumers[ns], { ms: 6000 });
    received[ns] = sortStrings(got.map(({ m }) => body(m)));
  }));
  return { received };
};

scenarios.message_type_mismatch = async ctx => {
  const { normal, fifo, tx } = ctx.topics;
  const { checker } = makeChecker([ 'ROLLBACK' ]);
  const producer = await ctx.producer({ topics: [ normal, fifo, tx ], checker });
  const sends = {
    fifo_to_normal: () => producer.send({ topic: normal, messageGroup: 'mg', body: Buffer.from('f') }),
    tx_to_normal: async () => {
      const transaction = producer.beginTransaction();
      await producer.send({ topic: normal, body: Buffer.from('t') }, transaction);
      await transaction.commit();
    },
    delay_to_normal: () => producer.send({
      topic: normal, deliveryTimestamp: new Date(Date.now() + 1000), body: Buffer.from('d'),
    }),
    normal_to_fifo: () => producer.send({ topic: fifo, body: Buffer.from('n') }),
    normal_to_tx: () => producer.send({ topic: tx, body: Buffer.from('n') }),
  };
  const cases = {};
  for (const name of ctx.params.cases || Object.keys(sends)) {
    if (!sends[name]) throw new Error(`unknown message_type_mismatch case ${name}`);
    cases[name] = stripValue(await attempt(sends[name]));
  }
  return { cases };
};

scenarios.priority = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const priorities = ctx.params.priorities ?? [ 0, 9, 3, 7, 1 ];
  // The topic is not declared at startup: a broker without it (or without
  // PRIORITY topics) refuses the first send, which is what is observed.
  const producer = await ctx.producer();
  let sendOutcome = null;
  let refusal = null;
  const sent = [];
  for (const p of priorities) {
    const res = stripValue(await attempt(() => producer.send({ topic: t, priority: p, body: Buffer.from(`pr${p}`) })));
    if (sendOutcome === null) sendOutcome = res;
    if (res.outcome !== 'ok') {
      refusal = { priority: p, ...res };
      break;
    }
    sent.push(p);
  }
  const observed = { send_outcome: sendOutcome, received_priorities: [], sent_priorities: sent, refusal };
  const started = await attempt(() => ctx.simpleConsumer(g, t, '*'));
  if (started.outcome !== 'ok') return { ...observed, consumer_outcome: stripValue(started) };
  const got = await receiveUntil(started.value, { ms: 6000 });
  observed.received_priorities = got.map(({ m }) => {
    const match = /^pr(\d+)$/.exec(body(m));
    return match ? Number(match[1]) : null;
  });
  return observed;
};

scenarios.lite = async ctx => {
  const { t } = ctx.topics;
  const { g } = ctx.groups;
  const liteTopic = ctx.params.lite_topic ?? 'lt1';
  const producer = await ctx.producer(); // t not declared: see priority
  const send = stripValue(await attempt(() => producer.send({ topic: t, liteTopic, body: Buffer.from('lite') })));
  const seen = [];
  const listener = { consume(m) { seen.push(body(m)); return ConsumeResult.SUCCESS; } };
  const started = await attempt(() => {
    // The public way is LitePushConsumerBuilder...build(), which makes and
    // starts a LitePushConsumerImpl; when its startup fails the builder drops
    // the half-started client (and its timers, which keep the process alive).
    // So the builder checks the settings, and the runner makes the same
    // LitePushConsumerImpl itself, to shut it down whatever happens.
    new LitePushConsumerBuilder()
      .setClientConfiguration(ctx.options())
      .setConsumerGroup(g)
      .bindTopic(t)
      .setMessageListener(listener);
    const consumer = new LitePushConsumerImpl({
      ...ctx.options(), consumerGroup: g, bindTopic: t, messageListener: listener,
    });
    return ctx.start(consumer, 'lite push consumer');
  });
  if (started.outcome !== 'ok') {
    return { send_outcome: send, received: 0, consumer_outcome: stripValue(started) };
  }
  const subscribed = await attempt(() => started.value.subscribeLite(liteTopic));
  await sleep(8000);
  await ctx.shutdown(started.value, 3000);
  return { send_outcome: send, received: seen.length, subscribe_outcome: stripValue(subscribed) };
};

function scenarioFor(id) {
  if (scenarios[id]) return scenarios[id];
  if (id.startsWith('tx_check_')) return txCheck;
  return null;
}

// ---------------------------------------------------------------- main

async function runOne(input, sc) {
  const fn = scenarioFor(sc.id);
  if (!fn) return { status: 'error', error: `this runner does not know scenario ${sc.id}`, elapsed_ms: 0 };
  const ctx = new Ctx(input, sc);
  const t0 = Date.now();
  let result;
  try {
    const observed = await withTimeout(Promise.resolve().then(() => fn(ctx)), SCENARIO_LIMIT_MS, `scenario ${sc.id}`);
    result = { status: 'ok', observed };
  } catch (err) {
    result = { status: 'error', error: errText(err) };
  }
  await ctx.closeAll();
  result.elapsed_ms = Date.now() - t0;
  return result;
}

async function main() {
  const input = JSON.parse(fs.readFileSync(inputPath, 'utf8'));
  const output = {
    client: { language: 'node', library: 'rocketmq-client-nodejs', version: CLIENT_VERSION },
    results: {},
  };
  note('client log: %s', logPath);
  for (const sc of input.scenarios || []) {
    note('%s ...', sc.id);
    const res = await runOne(input, sc);
    output.results[sc.id] = res;
    note('%s: %s in %d ms%s', sc.id, res.status, res.elapsed_ms,
      res.status === 'ok' ? ` ${JSON.stringify(res.observed)}` : ` ${res.error || res.reason}`);
  }
  fs.writeFileSync(outputPath, JSON.stringify(output, null, 2) + '\n');
  note('wrote %s', outputPath);
  if (backgroundShutdowns.size) {
    note('waiting for %d client shutdown(s) still running', backgroundShutdowns.size);
    await withTimeout(Promise.all([ ...backgroundShutdowns ]), BACKGROUND_LIMIT_MS, 'background shutdowns')
      .catch(err => note('%s', errText(err)));
  }
}

process.on('unhandledRejection', err => {
  note('unhandled rejection (ignored): %s', errText(err));
});

main().then(async () => {
  // Every client was shut down; the process should now end by itself. If
  // something still holds the event loop, say what and leave anyway.
  const timer = setTimeout(() => {
    note('still alive 10 s after the last scenario; active resources: %j; exiting',
      process.getActiveResourcesInfo());
    logStream.end(() => process.exit(0));
  }, 10000);
  timer.unref();
  logStream.end();
}, err => {
  note('runner failed: %s', errText(err));
  logStream.end(() => process.exit(1));
});
