// RocketMQ's official Node.js client (rocketmq-client-nodejs) against a rocketraft 5.x
// endpoint, run by tests/tests/grpc_v5_clients.rs with ENDPOINT, TOPIC, ACCESS_KEY, SECRET,
// SIMPLE_GROUP, FIFO_GROUP (an orderly group) and NACK_GROUP set. It prints one JSON line of what it
// saw; the Rust test judges it. Any step that fails or times out ends it with a message and
// exit code 1.
import { Producer, SimpleConsumer, PushConsumer, ConsumeResult } from 'rocketmq-client-nodejs';
import definitions from 'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const endpoints = env('ENDPOINT');
const topic = env('TOPIC');
const sessionCredentials = { accessKey: env('ACCESS_KEY'), accessSecret: env('SECRET') };
const quiet = { info() {}, warn() {}, error() {}, debug() {}, close() {} };
const common = { endpoints, namespace: '', logger: quiet, requestTimeout: 5000 };
// Each waiting step gives up after this long.
const STEP_MS = 30_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const out = {};

// What a producer with `credentials` is told when it starts: 'served', or its error and
// what it logged (the client's startup error does not carry the server's code; its log does).
async function refusal(credentials) {
  const logged = [];
  const logger = { ...quiet, error: (...args) => logged.push(args.map(String).join(' ')) };
  const producer = new Producer({ ...common, logger, sessionCredentials: credentials, topics: [topic] });
  try {
    await producer.startup();
    return 'served';
  } catch (error) {
    return [String(error && (error.message || error)), ...logged].join('\n');
  } finally {
    await producer.shutdown().catch(() => {});
  }
}

// Every transaction here is ended by its sender; a check-back would roll it back.
const checker = { async check() { return definitions.TransactionResolution.ROLLBACK; } };
const producer = new Producer({ ...common, sessionCredentials, topics: [topic], checker });
await producer.startup();
out.normal = (await producer.send({
  topic, tag: 'Plain', keys: ['client-key'], body: Buffer.from('plain'),
})).messageId;
out.fifo_sent = [];
for (let step = 0; step < 5; step++) {
  const receipt = await producer.send({
    topic, tag: 'Fifo', messageGroup: 'node-order', body: Buffer.from(`step ${step}`),
  });
  out.fifo_sent.push(receipt.messageId);
}
const deliverAt = Date.now() + 2000;
out.delay = (await producer.send({
  topic, tag: 'Delay', deliveryTimestamp: new Date(deliverAt), body: Buffer.from('later'),
})).messageId;
const transaction = producer.beginTransaction();
out.committed = (await producer.send({ topic, tag: 'Tx', body: Buffer.from('committed') }, transaction)).messageId;
await transaction.commit();
const rolledBack = producer.beginTransaction();
await producer.send({ topic, tag: 'Tx', body: Buffer.from('rolled back') }, rolledBack);
await rolledBack.rollback();

out.unsigned = await refusal(undefined);
out.wrong_secret = await refusal({ accessKey: sessionCredentials.accessKey, accessSecret: 'guess' });

// A simple consumer: each message it wants, the plain one nacked once (attempt 2 next).
const simple = new SimpleConsumer({
  ...common, sessionCredentials, consumerGroup: env('SIMPLE_GROUP'),
  subscriptions: new Map().set(topic, 'Plain||Delay||Tx'), awaitDuration: 2000,
});
await simple.startup();
out.received = [];
let nacked = false;
let deadline = Date.now() + STEP_MS;
while (out.received.length < 4 && Date.now() < deadline) {
  for (const message of await simple.receive(16, 10_000)) {
    const body = message.body.toString();
    out.received.push({
      body, tag: message.tag, attempt: message.deliveryAttempt, keys: message.keys,
      early_ms: body === 'later' ? deliverAt - Date.now() : undefined,
    });
    if (body === 'plain' && !nacked) {
      nacked = true;
      await simple.changeInvisibleDuration(message, 1000);
    } else {
      await simple.ack(message);
    }
  }
}

// A push consumer of the orderly group: it must learn the group is FIFO and get the message
// group in order.
out.fifo_received = [];
const push = new PushConsumer({
  ...common, sessionCredentials, consumerGroup: env('FIFO_GROUP'),
  subscriptions: new Map().set(topic, 'Fifo'), longPollingTimeout: 3000,
  messageListener: {
    consume(message) {
      out.fifo_received.push(message.body.toString());
      return ConsumeResult.SUCCESS;
    },
  },
});
await push.startup();
deadline = Date.now() + STEP_MS;
while (out.fifo_received.length < 5 && Date.now() < deadline) await sleep(100);
out.push_fifo = push.getPushConsumerSettings().isFifo();

await push.shutdown();

// A push consumer of another group that fails the plain message once: its nack (a
// ChangeInvisibleDuration of 0) must bring it back as attempt 2.
out.nack_attempts = [];
const nackPush = new PushConsumer({
  ...common, sessionCredentials, consumerGroup: env('NACK_GROUP'),
  subscriptions: new Map().set(topic, 'Plain'), longPollingTimeout: 3000,
  messageListener: {
    consume(message) {
      out.nack_attempts.push(message.deliveryAttempt);
      return message.deliveryAttempt === 1 ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
    },
  },
});
await nackPush.startup();
deadline = Date.now() + STEP_MS;
while (out.nack_attempts.length < 2 && Date.now() < deadline) await sleep(100);
await nackPush.shutdown();
await simple.shutdown();
await producer.shutdown();
console.log(JSON.stringify(out));
process.exit(0);
