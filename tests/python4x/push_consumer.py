"""RocketMQ's 4.x Python client (PyPI `rocketmq`, which bundles the C++ client) consumes from
a rocketraft cluster over remoting with a push consumer, as an existing 4.x app would, and
prints a JSON report for tests/remoting_clients.rs to judge: what it sent and every delivery.

It subscribes with a tag filter ("TagA || TagD"), sends tagged messages (TagB ones must not
reach it), fails one message once (it must come back through CONSUMER_SEND_MSG_BACK and the
group's %RETRY% topic, with reconsume times 1 and its own topic), and sends one at a delay
level (it must not arrive early); then STREAM_COUNT messages, one every STREAM_PAUSE_S,
during which the test may kill a broker group's leader. It waits until every message sent OK
and subscribed to was delivered.

Usage: push_consumer.py NAMESERVER TOPIC GROUP DELAY_LEVEL STREAM_COUNT
"""

import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage
from rocketmq.ffi import _CConsumeStatus, dll

SUBSCRIPTION = "TagA || TagD"
FAILS_ONCE = "fail-once"
DELAYED = "delayed"
# How long the consumer may take to see everything it should, leader kill included.
DELIVERY_TIMEOUT_S = 90
STREAM_PAUSE_S = 0.02


def now_ms():
    return int(time.time() * 1000)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


class Deliveries:
    """Every delivery, in order; a message named FAILS_ONCE fails its first delivery."""

    def __init__(self):
        self.lock = threading.Lock()
        self.all = []
        self.changed = threading.Condition(self.lock)

    def on_message(self, _consumer, handle):
        msg = RecvMessage(handle)
        body = text(msg.body)
        with self.lock:
            first = not any(d["body"] == body for d in self.all)
            self.all.append({
                "body": body,
                "topic": msg.topic,
                "tags": text(msg.tags),
                "reconsume_times": msg.reconsume_times,
                "msg_id": msg.id,
                "queue_id": msg.queue_id,
                "store_ms": msg.store_timestamp,
                "received_ms": now_ms(),
            })
            self.changed.notify_all()
        if body == FAILS_ONCE and first:
            # The wrapper's subscribe() turns an exception into success (ctypes drops it),
            # so the C callback is registered directly to answer RECONSUME_LATER.
            return _CConsumeStatus.RECONSUME_LATER.value
        return _CConsumeStatus.CONSUME_SUCCESS.value

    def wait_for(self, done, timeout_s):
        deadline = time.time() + timeout_s
        with self.lock:
            while not done(self.all):
                left = deadline - time.time()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


def main():
    namesrv, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    delay_level, stream_count = int(sys.argv[4]), int(sys.argv[5])
    deliveries = Deliveries()
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    dll.Subscribe(consumer._handle, topic.encode(), SUBSCRIPTION.encode())
    consumer._register_callback(deliveries.on_message)
    consumer.start()

    producer = Producer("remoting-4x-consumer-test", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sent = []

    def send(body, tags, level):
        msg = Message(topic)
        msg.set_tags(tags)
        msg.set_keys("key-" + body)
        msg.set_body(body)
        if level:
            msg.set_delay_time_level(level)
        sending_ms = now_ms()
        try:
            result = producer.send_sync(msg)
            status, msg_id = int(result.status), result.msg_id
        except Exception as error:  # the client's own failure, reported, not fatal
            status, msg_id = str(error), None
        sent.append({
            "body": body,
            "tags": tags,
            "delay_level": level,
            "status": status,
            "msg_id": msg_id,
            # The delay counts from when the broker stored it: after this.
            "sending_ms": sending_ms,
            "sent_ms": now_ms(),
        })

    # The C++ client hands all messages of a pull to the callback in turn and, when one
    # fails, sends every one of them back: the failing message goes alone, and the others
    # only once it was delivered.
    plan = [
        ("a0", "TagA", 0),
        ("b0", "TagB", 0),
        ("a1", "TagA", 0),
        ("b1", "TagB", 0),
        (DELAYED, "TagD", delay_level),
    ]
    try:
        send(FAILS_ONCE, "TagA", 0)
        first = deliveries.wait_for(
            lambda seen: any(d["body"] == FAILS_ONCE for d in seen), DELIVERY_TIMEOUT_S)
        if first:
            for body, tags, level in plan:
                send(body, tags, level)
            for i in range(stream_count):
                send("stream-%d" % i, "TagA", 0)
                time.sleep(STREAM_PAUSE_S)
    finally:
        producer.shutdown()

    wanted = {FAILS_ONCE} | {
        send["body"] for send in sent if send["status"] == 0 and send["tags"] != "TagB"
    }

    def done(seen):
        bodies = [d["body"] for d in seen]
        return wanted <= set(bodies) and bodies.count(FAILS_ONCE) >= 2

    complete = deliveries.wait_for(done, DELIVERY_TIMEOUT_S)
    consumer.shutdown()
    with deliveries.lock:
        report = {"sent": sent, "deliveries": list(deliveries.all), "complete": complete}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
