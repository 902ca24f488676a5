// ali-ons (npm, a pure JavaScript RocketMQ 4.x client) against a rocketraft cluster over
// remoting, run by tests/tests/remoting_clients.rs. It prints one JSON line of what it sent
// and every delivery; the Rust test judges it.
//
// Usage: node ali_ons.js NAMESERVER TOPIC GROUP DELAY_LEVEL STREAM_COUNT
//
// Its push consumer subscribes with a tag filter ("TagA || TagD"). The producer sends one
// message the consumer fails once (it must come back through CONSUMER_SEND_MSG_BACK with
// reconsume times 1 and its own topic); once that was delivered, tagged messages (TagB ones
// must not arrive) and one at DELAY_LEVEL (not before its delay); then STREAM_COUNT messages,
// one every STREAM_PAUSE_MS, during which the test kills a broker group's leader. It waits
// until every message sent OK and subscribed to was delivered.
'use strict';

const { Producer, Consumer, Message } = require('ali-ons');

const [nameSrv, topic, group, delayLevelText, streamCountText] = process.argv.slice(2);
const delayLevel = Number(delayLevelText);
const streamCount = Number(streamCountText);
const FAILS_ONCE = 'fail-once';
const DELAYED = 'delayed';
const SUBSCRIPTION = 'TagA || TagD';
const STREAM_PAUSE_MS = 20;
// How long every delivery may take, leader kill included.
const DELIVERY_TIMEOUT_MS = 90_000;
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
// ali-ons requires an HTTP client for its address-server lookup, which it makes only when
// no nameSrv is given.
const httpclient = {
  request: () => Promise.reject(new Error('no address-server lookup: nameSrv is set')),
};
// The test's drill routes again within seconds (POLL_NAMESERVER_MS), not at the client's 30 s
// default; a failover measurement sets the default.
const pollNameServerInteval = Number(process.env.POLL_NAMESERVER_MS || 5_000);
const options = { nameSrv: [nameSrv], httpclient, logger: quiet, pollNameServerInteval };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const deliveries = [];
const sent = [];

async function waitFor(done, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

async function send(producer, body, tags, level) {
  const msg = new Message(topic, tags, body);
  msg.keys = [`key-${body}`];
  if (level) msg.delayTimeLevel = level;
  const sendingMs = Date.now();
  try {
    const result = await producer.send(msg);
    sent.push({ body, tags, status: result.sendStatus, msg_id: result.msgId, sending_ms: sendingMs,
      sent_ms: Date.now() });
  } catch (err) {
    sent.push({ body, tags, status: 'ERROR', error: String(err.message), sending_ms: sendingMs,
      sent_ms: Date.now() });
  }
}

async function main() {
  const consumer = new Consumer({ ...options, consumerGroup: group });
  consumer.on('error', () => {});
  consumer.subscribe(topic, SUBSCRIPTION, async (msg) => {
    const body = msg.body.toString();
    const first = !deliveries.some((d) => d.body === body);
    deliveries.push({ body, topic: msg.topic, tags: msg.tags, reconsume_times: msg.reconsumeTimes,
      msg_id: msg.msgId, queue_id: msg.queueId, received_ms: Date.now() });
    if (body === FAILS_ONCE && first) throw new Error('fails once');
  });
  await consumer.ready();

  const producer = new Producer({ ...options, producerGroup: `${group}-producer` });
  // A route refresh that fails (the group's retry topic has none until its first heartbeat)
  // is reported as an error event; the clients go on, and so does this script.
  producer.on('error', () => {});
  await producer.ready();
  await send(producer, FAILS_ONCE, 'TagA', 0);
  // ali-ons consumes a pull's messages one at a time, but the C++ and Java clients may send
  // a whole batch back: the failing message goes alone here too, as in the Python test.
  const first = await waitFor(() => deliveries.some((d) => d.body === FAILS_ONCE), DELIVERY_TIMEOUT_MS);
  if (first) {
    for (const [body, tags, level] of [['a0', 'TagA', 0], ['b0', 'TagB', 0], ['a1', 'TagA', 0],
      ['b1', 'TagB', 0], [DELAYED, 'TagD', delayLevel]]) {
      await send(producer, body, tags, level);
    }
    for (let i = 0; i < streamCount; i++) {
      await send(producer, `stream-${i}`, 'TagA', 0);
      await sleep(STREAM_PAUSE_MS);
    }
  }
  const wanted = sent.filter((s) => s.status === 'SEND_OK' && s.tags !== 'TagB').map((s) => s.body);
  const complete = await waitFor(() => {
    const bodies = new Set(deliveries.map((d) => d.body));
    return wanted.every((body) => bodies.has(body))
      && deliveries.filter((d) => d.body === FAILS_ONCE).length >= 2;
  }, DELIVERY_TIMEOUT_MS);
  // Closing unregisters from every broker of the routes, the killed one too, which fails.
  await producer.close().catch(() => {});
  await consumer.close().catch(() => {});
  console.log(JSON.stringify({ sent, deliveries, complete }));
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
