"""RocketMQ's 4.x Python client (PyPI `rocketmq`, which bundles the C++ client) sends to a
rocketraft cluster over remoting, as an existing 4.x app would, and prints a JSON report for
tests/remoting_clients.rs to judge: every send's status and message id, with what was sent.

Usage: producer.py NAMESERVER TOPIC
"""

import json
import sys

from rocketmq.client import Message, Producer

# Over the client's 4 KiB compression threshold: sent zlib-compressed.
BIG_BODY_BYTES = 20000


def message(topic, body, tags, keys):
    msg = Message(topic)
    msg.set_tags(tags)
    msg.set_keys(keys)
    msg.set_body(body)
    return msg


def main():
    namesrv, topic = sys.argv[1], sys.argv[2]
    producer = Producer("remoting-4x-producer", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sends = []
    try:
        plain = [("body-%d" % i, "TagA", "key-%d" % i) for i in range(5)]
        big = [("x" * BIG_BODY_BYTES, "TagBig", "key-big")]
        for body, tags, keys in plain + big:
            result = producer.send_sync(message(topic, body, tags, keys))
            sends.append({
                "status": int(result.status),
                "msg_id": result.msg_id,
                "body": body,
                "tags": tags,
                "keys": keys,
            })
        batch = [("batch-%d" % i, "TagB", "batch-key-%d" % i) for i in range(3)]
        result = producer.send_batch([message(topic, *fields) for fields in batch])
        for body, tags, keys in batch:
            sends.append({
                "status": int(result.status),
                "msg_id": None,
                "body": body,
                "tags": tags,
                "keys": keys,
            })
    finally:
        producer.shutdown()
    print(json.dumps({"sends": sends}))


if __name__ == "__main__":
    main()
