#!/usr/bin/env python3
"""The worker that the conformance suite drives. Each job type exercises one protocol path.

Environment:
  JOBWIRE_ADDR              broker address (default 127.0.0.1:7070)
  JOBWIRE_WORKER_ID         worker id (default host-pid)
  JOBWIRE_CAPACITY          concurrent jobs (default 8)
  JOBWIRE_QUEUES            comma-separated queues to take from (default: every queue)
  JOBWIRE_GRACE_SECONDS     shutdown grace period (default 30)
  JOBWIRE_CONFORMANCE_DIR   where counters and marker files go (default: a new temp dir)
  JOBWIRE_TOKEN             API token for a broker with auth on
  JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY
                            connect over TLS: CA to trust, client certificate and key (mutual TLS)

Job types (JSON payloads):
  echo              succeeds once the payload decodes; writes the payload's bytes to <dir>/echo-<job_id>
  fatal             raises ValueError (FATAL)
  flaky             {"key": K, "fail_times": N}: fails transiently N times per key, then succeeds;
                    the count lives in <dir>/flaky-<key> so it survives restarts
  always_transient  raises RuntimeError (TRANSIENT)
  retry_after       {"seconds": S}: raises RetryAfter(S)
  slow              {"ms": M}: sleeps M ms, stopping early on a cancel
  wait_cancel       waits for a cancel, then writes <dir>/cancelled-<job_id> and returns
  block             {"marker": NAME}: writes <dir>/started-<NAME>, then waits for a cancel
  result            returns the payload's bytes as the job's result
  result_size       {"bytes": N}: returns a result of N bytes ("x" each)
  progress          {"steps": N, "marker": NAME}: reports progress i/N, "step i of N", for i in
                    1..N at once, writes <dir>/started-<NAME>, then waits for a cancel
  parents           returns its parents' results as JSON: [{"job_id", "type", "state", "result"}]
"""

import logging
import os
import re
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobwire import RetryAfter, Worker  # noqa: E402

log = logging.getLogger("conformance")
state_dir = os.environ.get("JOBWIRE_CONFORMANCE_DIR") or tempfile.mkdtemp(prefix="jobwire-conformance-")
os.makedirs(state_dir, exist_ok=True)
flaky_lock = threading.Lock()

worker = Worker.from_env(  # address, token and TLS: JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS_*
    worker_id=os.environ.get("JOBWIRE_WORKER_ID") or None,
    capacity=int(os.environ.get("JOBWIRE_CAPACITY", "8")),
    queues=tuple(q for q in os.environ.get("JOBWIRE_QUEUES", "").split(",") if q),
    grace_period=float(os.environ.get("JOBWIRE_GRACE_SECONDS", "30")),
)


def safe_name(s):
    """Keep marker file names inside state_dir whatever the payload says."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(s))


def write_marker(name, data=""):
    path = os.path.join(state_dir, safe_name(name))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


@worker.handler("echo")
def echo(ctx):
    if ctx.payload:
        ctx.json()
    write_marker(f"echo-{ctx.id}", ctx.payload)


@worker.handler("fatal")
def fatal(ctx):
    raise ValueError(f"job {ctx.id} is fatal by design")


@worker.handler("flaky")
def flaky(ctx):
    p = ctx.json()
    key, fail_times = p["key"], int(p["fail_times"])
    path = os.path.join(state_dir, "flaky-" + safe_name(key))
    with flaky_lock:
        try:
            with open(path) as f:
                failures = int(f.read().strip() or 0)
        except FileNotFoundError:
            failures = 0
        if failures < fail_times:
            write_marker("flaky-" + key, str(failures + 1))
            raise ConnectionError(f"flaky failure {failures + 1} of {fail_times} for key {key!r}")


@worker.handler("always_transient")
def always_transient(ctx):
    raise RuntimeError(f"job {ctx.id} fails transiently by design")


@worker.handler("retry_after")
def retry_after(ctx):
    raise RetryAfter(float(ctx.json()["seconds"]), "asked to retry later")


@worker.handler("slow")
def slow(ctx):
    ctx.sleep(int(ctx.json()["ms"]) / 1000.0)


@worker.handler("wait_cancel")
def wait_cancel(ctx):
    ctx.wait_cancelled()
    write_marker(f"cancelled-{ctx.id}", ctx.cancel_reason or "")
    log.info("job %d cancelled (%s)", ctx.id, ctx.cancel_reason)


@worker.handler("block")
def block(ctx):
    write_marker("started-" + safe_name(ctx.json()["marker"]), str(ctx.id))
    ctx.wait_cancelled()
    ctx.raise_if_cancelled()


@worker.handler("result")
def result(ctx):
    return ctx.payload


@worker.handler("result_size")
def result_size(ctx):
    return b"x" * int(ctx.json()["bytes"])


@worker.handler("progress")
def progress(ctx):
    p = ctx.json()
    steps = int(p["steps"])
    for i in range(1, steps + 1):
        ctx.progress(i / steps, f"step {i} of {steps}")
    write_marker("started-" + safe_name(p["marker"]), str(ctx.id))
    ctx.wait_cancelled()
    ctx.raise_if_cancelled()


@worker.handler("parents")
def parents(ctx):
    return [
        {"job_id": p.job_id, "type": p.type, "state": p.state, "result": p.result.decode("utf-8", "replace")}
        for p in ctx.parent_results
    ]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("state dir %s", state_dir)
    worker.run_sync()
