"""RocketMQ's official Python client (rocketmq-python-client) against a rocketraft 5.x
endpoint, run by tests/tests/grpc_v5_python.rs with ENDPOINT, TOPIC, ACCESS_KEY, SECRET,
SIMPLE_GROUP and FIFO_GROUP (an orderly group) set. It prints one JSON line of what it saw;
the Rust test judges it. A step that fails raises (exit code 1)."""

import json
import logging
import os
import threading
import time

from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer, SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer, TransactionChecker

# Each waiting step gives up after this long (seconds).
STEP_S = 30

endpoint = os.environ["ENDPOINT"]
topic = os.environ["TOPIC"]
credentials = Credentials(os.environ["ACCESS_KEY"], os.environ["SECRET"])
out = {}


def config(creds):
    return ClientConfiguration(endpoint, creds, request_timeout=5)


def message(body, tag, group=None, key=None, deliver_at=None):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    if group:
        m.message_group = group
    if key:
        m.keys = key
    if deliver_at:
        m.delivery_timestamp = deliver_at
    return m


class RollBack(TransactionChecker):
    """Every transaction here is ended by its sender; a check-back rolls it back."""

    def check(self, message):
        return TransactionResolution.ROLLBACK


class Logged(logging.Handler):
    """Keeps what the client logs (its startup error does not carry the server's code; its
    log does)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def refusal(creds):
    """What a producer with `creds` is told when it sends: 'served', or its error and what
    the client logged meanwhile."""
    logged = Logged()
    client_log = logging.getLogger("rocketmq-python-client")
    client_log.addHandler(logged)
    producer = Producer(config(creds), (topic,))
    try:
        producer.startup()
        producer.send(message("refused?", "Plain"))
        return "served"
    except Exception as error:  # noqa: BLE001 - the error is the report
        return "\n".join([repr(error), *logged.lines])
    finally:
        client_log.removeHandler(logged)
        try:
            producer.shutdown()
        except Exception:  # noqa: BLE001
            pass


producer = Producer(config(credentials), (topic,), RollBack())
producer.startup()
out["normal"] = producer.send(message("plain", "Plain", key="client-key")).message_id
out["fifo_sent"] = [
    producer.send(message(f"step {step}", "Fifo", group="py-order")).message_id for step in range(5)
]
# This client writes the delivery time it is given into the protobuf timestamp's seconds,
# unconverted; given epoch milliseconds (the unit it reads back), the endpoint reads them so.
deliver_at = int(time.time() * 1000) + 3000
out["delay"] = producer.send(message("later", "Delay", deliver_at=deliver_at)).message_id
for body, end in (("committed", "commit"), ("rolled back", "rollback")):
    transaction = producer.begin_transaction()
    producer.send(message(body, "Tx"), transaction)
    getattr(transaction, end)()

out["unsigned"] = refusal(Credentials())
out["wrong_secret"] = refusal(Credentials(os.environ["ACCESS_KEY"], "guess"))

# A simple consumer: each message it wants, the plain one nacked once (attempt 2 next).
simple = SimpleConsumer(
    config(credentials),
    os.environ["SIMPLE_GROUP"],
    {topic: FilterExpression("Plain||Delay||Tx")},
    await_duration=2,
)
simple.startup()
out["received"] = []
nacked = False
deadline = time.time() + STEP_S
while len(out["received"]) < 4 and time.time() < deadline:
    for m in simple.receive(16, 10) or []:
        body = m.body.decode()
        out["received"].append({
            "body": body,
            "tag": m.tag,
            "attempt": m.delivery_attempt,
            "keys": list(m.keys or []),
            "early_ms": deliver_at - int(time.time() * 1000) if body == "later" else None,
        })
        if body == "plain" and not nacked:
            nacked = True
            simple.change_invisible_duration(m, 1)
        else:
            simple.ack(m)


class Record(MessageListener):
    """Records the bodies it consumes, in order."""

    def __init__(self):
        self.bodies = []
        self.lock = threading.Lock()

    def consume(self, m):
        with self.lock:
            self.bodies.append(m.body.decode())
        return ConsumeResult.SUCCESS


# A push consumer of the orderly group: it must learn the group is FIFO and get the message
# group in order.
record = Record()
push = PushConsumer(
    config(credentials),
    os.environ["FIFO_GROUP"],
    record,
    {topic: FilterExpression("Fifo")},
)
push.startup()
deadline = time.time() + STEP_S
while len(record.bodies) < 5 and time.time() < deadline:
    time.sleep(0.1)
with record.lock:
    out["fifo_received"] = list(record.bodies)
out["push_fifo"] = push.fifo

push.shutdown()
simple.shutdown()
producer.shutdown()
print(json.dumps(out), flush=True)
os._exit(0)
