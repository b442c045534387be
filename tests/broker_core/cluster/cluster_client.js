// The official Node.js client (npm rocketmq-client-nodejs) against a cluster,
// run in a subprocess like cluster_client.py. Usage:
//   node cluster_client.js roundtrip ACCESS TOPIC GROUP COUNT PREFIX
// sends COUNT messages through ACCESS, then consumes them with GROUP; the last
// line printed is "RESULT <json>".
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const [name, access, topic, group, count, prefix] = process.argv.slice(2);

async function roundtrip() {
  const producer = new Producer({ endpoints: access });
  await producer.startup();
  const brokers = {};
  const sent = [];
  for (let i = 0; i < Number(count); i++) {
    const body = `${prefix}-${i}`;
    const receipt = await producer.send({ topic, keys: [body], body: Buffer.from(body) });
    const broker = receipt.messageQueue.broker.name;
    brokers[broker] = (brokers[broker] || 0) + 1;
    sent.push(body);
  }
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    consumerGroup: group, endpoints: access, awaitDuration: 2000,
    subscriptions: new Map().set(topic, '*'),
  });
  await consumer.startup();
  const got = [];
  const end = Date.now() + 60000;
  while (got.filter(b => b.startsWith(prefix)).length < sent.length && Date.now() < end) {
    for (const m of await consumer.receive(16, 20000)) {
      got.push(m.body.toString());
      await consumer.ack(m);
    }
  }
  await consumer.shutdown();
  return { sent, brokers, got };
}

(async () => {
  const result = await { roundtrip }[name]();
  console.log('RESULT ' + JSON.stringify(result));
  process.exit(0);
})().catch(err => { console.error(err); process.exit(1); });
