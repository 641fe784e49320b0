#!/usr/bin/env python3
"""A no-op worker for the benchmark (`jobwire-bench --worker-cmd`): serves job type `noop`.

    make bench BENCH_ARGS="--scenarios drain --worker-cmd '.bin/python/bin/python sdks/python/examples/bench_worker.py'"
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobwire import Worker  # noqa: E402

worker = Worker(
    os.environ.get("JOBWIRE_ADDR", "127.0.0.1:7070"),
    worker_id=os.environ.get("JOBWIRE_WORKER_ID") or None,
    capacity=int(os.environ.get("JOBWIRE_CONCURRENCY", "256")),
)


@worker.handler("noop")
async def noop(ctx):
    return None


if __name__ == "__main__":
    worker.run_sync()
