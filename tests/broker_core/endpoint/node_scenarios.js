// Client-side scenarios with the official Node.js client (npm
// rocketmq-client-nodejs), run in a subprocess like scenarios.py.
// Usage: node node_scenarios.js NAME ENDPOINT SUFFIX; the last line printed is
// "RESULT <json>".
'use strict';
const {
  Producer, SimpleConsumer, PushConsumer, ConsumeResult,
} = require('rocketmq-client-nodejs');

const fs = require('fs');

const [name, ep, suf] = process.argv.slice(2);
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function drain(consumer, want, timeoutMs) {
  const got = [];
  const end = Date.now() + timeoutMs;
  while (got.length < want && Date.now() < end) {
    for (const m of await consumer.receive(16, 20000)) {
      got.push(m);
      await consumer.ack(m);
    }
  }
  return got;
}

async function startProducer(options = {}) {
  const p = new Producer({ endpoints: ep, ...options });
  await p.startup();
  return p;
}

async function startSimpleConsumer(group, topic) {
  const c = new SimpleConsumer({
    consumerGroup: group, endpoints: ep, awaitDuration: 2000,
    subscriptions: new Map().set(topic, '*'),
  });
  await c.startup();
  return c;
}

function view(m) {
  return {
    id: m.messageId, tag: m.tag, keys: m.keys, body: m.body.toString(),
    props: Object.fromEntries(m.properties), group: m.messageGroup || null,
  };
}

const scenarios = {
  async normal() {
    const topic = `NT${suf}`;
    const producer = await startProducer();
    const receipt = await producer.send({
      topic, tag: 'tagA', keys: ['k1', 'k2'],
      properties: new Map([['region', 'eu']]), body: Buffer.from('hello'),
    });
    const consumer = await startSimpleConsumer(`NG${suf}`, topic);
    const got = await drain(consumer, 1, 20000);
    await consumer.shutdown();
    await producer.shutdown();
    return { sent: receipt.messageId, got: got.map(view) };
  },

  async delay() {
    const topic = `ND${suf}`;
    const producer = await startProducer();
    const start = Date.now();
    await producer.send({ topic, delay: 2000, body: Buffer.from('later') });
    const consumer = await startSimpleConsumer(`NDG${suf}`, topic);
    const got = await drain(consumer, 1, 20000);
    const waited = Date.now() - start;
    await consumer.shutdown();
    await producer.shutdown();
    return { got: got.map(m => m.body.toString()), waited_at_least_2s: waited >= 1900 };
  },

  async fifo() {
    const topic = `NF${suf}`;
    const producer = await startProducer();
    for (let i = 0; i < 5; i++) {
      await producer.send({ topic, messageGroup: 'g1', body: Buffer.from(`f${i}`) });
    }
    const consumer = await startSimpleConsumer(`NFG${suf}`, topic);
    const got = await drain(consumer, 5, 20000);
    await consumer.shutdown();
    await producer.shutdown();
    return { got: got.map(m => m.body.toString()), group: got.length ? got[0].messageGroup : null };
  },

  // A listener that fails the first attempt: the retry comes after the
  // group's first backoff, not at once (the client asks for 0).
  async push_retry() {
    const topic = `NR${suf}`;
    const calls = [];
    const consumer = new PushConsumer({
      consumerGroup: `NRG${suf}`, endpoints: ep,
      subscriptions: new Map().set(topic, '*'),
      messageListener: {
        async consume(m) {
          if (m.body.toString() !== 'r') return ConsumeResult.SUCCESS;
          calls.push({ at: Date.now(), attempt: m.deliveryAttempt });
          return calls.length === 1 ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        },
      },
    });
    await consumer.startup();
    const producer = await startProducer();
    await producer.send({ topic, body: Buffer.from('r') });
    const end = Date.now() + 30000;
    while (calls.length < 1 && Date.now() < end) await sleep(10);
    // More messages right after the failure wake the consumer's long polls:
    // a retry visible at once is popped with them.
    for (let i = 0; i < 3; i++) {
      await sleep(20);
      await producer.send({ topic, body: Buffer.from(`w${i}`) });
    }
    while (calls.length < 2 && Date.now() < end) await sleep(50);
    await sleep(1500); // acknowledged: no third delivery
    // No consumer.shutdown(): it waits out the long poll in flight (20 s);
    // the process exits after the result and the broker sees it go.
    await producer.shutdown();
    return {
      attempts: calls.map(c => c.attempt),
      gap_ms: calls.length >= 2 ? calls[1].at - calls[0].at : null,
    };
  },

  async push() {
    const topic = `NP${suf}`;
    const seen = [];
    const consumer = new PushConsumer({
      consumerGroup: `NPG${suf}`, endpoints: ep,
      subscriptions: new Map().set(topic, '*'),
      messageListener: { async consume(m) { seen.push(m.body.toString()); return ConsumeResult.SUCCESS; } },
    });
    await consumer.startup();
    const producer = await startProducer();
    for (let i = 0; i < 3; i++) await producer.send({ topic, body: Buffer.from(`p${i}`) });
    const end = Date.now() + 30000;
    while (seen.length < 3 && Date.now() < end) await sleep(200);
    await sleep(1000); // no redelivery of what was acknowledged
    await producer.shutdown(); // the consumer: see push_retry
    return { seen: seen.slice().sort() };
  },

  async transaction() {
    const topic = `NX${suf}`;
    const checked = [];
    const producer = await startProducer({
      checker: { async check(m) { checked.push(m.body.toString()); return 1; } }, // COMMIT
    });
    const t1 = producer.beginTransaction();
    await producer.send({ topic, body: Buffer.from('committed') }, t1);
    await t1.commit();
    const t2 = producer.beginTransaction();
    await producer.send({ topic, body: Buffer.from('rolled-back') }, t2);
    await t2.rollback();
    const t3 = producer.beginTransaction();
    await producer.send({ topic, body: Buffer.from('checked') }, t3); // left to the check
    const consumer = await startSimpleConsumer(`NXG${suf}`, topic);
    const got = await drain(consumer, 2, 30000);
    await consumer.shutdown();
    await producer.shutdown();
    return { got: got.map(m => m.body.toString()).sort(), checked };
  },
  // Alive across an endpoint restart: the checker says "unknown" until the
  // test creates GO_FILE (after restarting the endpoint), then commits.
  async restart_tx() {
    const topic = `NR${suf}`;
    const checks = [];
    const producer = await startProducer({
      checker: {
        async check() {
          const go = fs.existsSync(process.env.GO_FILE);
          checks.push(go ? 'commit' : 'unknown');
          return go ? 1 : 0; // COMMIT, or unspecified: ask again later
        },
      },
    });
    const t = producer.beginTransaction();
    await producer.send({ topic, body: Buffer.from('across') }, t);
    console.log('READY');
    const end = Date.now() + 90000;
    while (!checks.includes('commit') && Date.now() < end) await sleep(200);
    await sleep(1000); // the EndTransaction goes out
    await producer.shutdown();
    return { checks };
  },
};

scenarios[name]().then(
  res => { console.log('RESULT ' + JSON.stringify(res)); process.exit(0); },
  err => { console.log('ERROR ' + (err && err.stack || err)); process.exit(1); },
);
