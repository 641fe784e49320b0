#!/usr/bin/env python3
"""A minimal Jobwire worker: greets people.

    JOBWIRE_ADDR=127.0.0.1:7070 /usr/bin/python3 sdks/python/examples/worker.py
    go run ./cmd/jobwire enqueue --addr 127.0.0.1:7070 --type greet --payload '{"name": "Ada"}'
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobwire import FatalError, Worker  # noqa: E402

worker = Worker.from_env(  # address, token and TLS: JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS_*
    worker_id=os.environ.get("JOBWIRE_WORKER_ID") or None,
    capacity=int(os.environ.get("JOBWIRE_CAPACITY", "8")),
)


@worker.handler("greet")
def greet(ctx):
    payload = ctx.json()  # malformed JSON raises json.JSONDecodeError: FATAL, straight to the DLQ
    name = payload.get("name")
    if not name:
        raise FatalError("payload needs a name")
    ctx.sleep(0.1)  # stands in for real work; wakes early and raises JobCancelled on a cancel
    print(f"hello, {name} (job {ctx.id}, attempt {ctx.attempt})", file=sys.stderr)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    worker.run_sync()
