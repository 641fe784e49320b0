#!/usr/bin/env node
'use strict';

// The worker that the conformance suite drives. Each job type exercises one protocol path.
//
// Environment:
//   JOBWIRE_ADDR              broker address (default 127.0.0.1:7070)
//   JOBWIRE_WORKER_ID         worker id (default host-pid)
//   JOBWIRE_CAPACITY          concurrent jobs (default 8)
//   JOBWIRE_QUEUES            comma-separated queues to take from (default: every queue)
//   JOBWIRE_GRACE_SECONDS     shutdown grace period (default 30)
//   JOBWIRE_CONFORMANCE_DIR   where counters and marker files go (default: a new temp dir)
//   JOBWIRE_TOKEN             API token for a broker with auth on
//   JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY
//                             connect over TLS: CA to trust, client certificate and key (mutual TLS)
//
// Job types (JSON payloads):
//   echo              succeeds once the payload decodes; writes the payload's bytes to
//                     <dir>/echo-<job_id>
//   fatal             throws TypeError (FATAL)
//   flaky             {"key": K, "fail_times": N}: fails transiently N times per key, then
//                     succeeds; the count lives in <dir>/flaky-<key> so it survives restarts
//   always_transient  throws a plain Error (TRANSIENT)
//   retry_after       {"seconds": S}: throws RetryAfterError(S * 1000)
//   slow              {"ms": M}: sleeps M ms, stopping early on a cancel
//   wait_cancel       waits for a cancel, then writes <dir>/cancelled-<job_id> and resolves
//   block             {"marker": NAME}: writes <dir>/started-<NAME>, then waits for a cancel
//   result            resolves to the payload's bytes: the job's result
//   result_size       {"bytes": N}: resolves to a result of N bytes ("x" each)
//   progress          {"steps": N, "marker": NAME}: reports progress i/N, "step i of N", for i
//                     in 1..N at once, writes <dir>/started-<NAME>, then waits for a cancel
//   parents           resolves to its parents' results as JSON: [{job_id, type, state, result}]

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');
const { Worker, RetryAfterError } = require('..');

const stateDir = process.env.JOBWIRE_CONFORMANCE_DIR || fs.mkdtempSync(path.join(os.tmpdir(), 'jobwire-conformance-'));
fs.mkdirSync(stateDir, { recursive: true });

/** Keep marker file names inside stateDir whatever the payload says. */
const safeName = (s) => String(s).replace(/[^A-Za-z0-9._-]/g, '_');

function writeMarker(name, text = '') {
  const file = path.join(stateDir, safeName(name));
  fs.writeFileSync(`${file}.tmp`, text);
  fs.renameSync(`${file}.tmp`, file);
}

/** Resolves once the signal aborts. */
const aborted = (signal) =>
  new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });

// Address, token and TLS from JOBWIRE_ADDR, JOBWIRE_TOKEN and JOBWIRE_TLS_*.
const worker = Worker.fromEnv({
  workerId: process.env.JOBWIRE_WORKER_ID || undefined,
  capacity: Number(process.env.JOBWIRE_CAPACITY || 8),
  queues: (process.env.JOBWIRE_QUEUES || '').split(',').filter(Boolean),
  gracePeriodMs: Number(process.env.JOBWIRE_GRACE_SECONDS || 30) * 1000,
});

worker.handle('echo', async (ctx) => {
  if (ctx.payload.length > 0) ctx.json();
  writeMarker(`echo-${ctx.id}`, ctx.payload);
});

worker.handle('fatal', async (ctx) => {
  throw new TypeError(`job ${ctx.id} is fatal by design`);
});

worker.handle('flaky', async (ctx) => {
  const { key, fail_times: failTimes } = ctx.json();
  const name = `flaky-${safeName(key)}`;
  let failures = 0;
  try {
    failures = Number(fs.readFileSync(path.join(stateDir, name), 'utf8').trim() || 0);
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
  // Node runs handlers on one thread and this block does no await, so counts never race.
  if (failures < Number(failTimes)) {
    writeMarker(name, String(failures + 1));
    throw new Error(`flaky failure ${failures + 1} of ${failTimes} for key ${key}`);
  }
});

worker.handle('always_transient', async (ctx) => {
  throw new Error(`job ${ctx.id} fails transiently by design`);
});

worker.handle('retry_after', async (ctx) => {
  throw new RetryAfterError(Number(ctx.json().seconds) * 1000, 'asked to retry later');
});

worker.handle('slow', async (ctx) => {
  await sleep(Number(ctx.json().ms), undefined, { signal: ctx.signal });
});

worker.handle('wait_cancel', async (ctx) => {
  await aborted(ctx.signal);
  writeMarker(`cancelled-${ctx.id}`, ctx.cancelReason);
  console.error(`job ${ctx.id} cancelled (${ctx.cancelReason})`);
});

worker.handle('block', async (ctx) => {
  writeMarker(`started-${safeName(ctx.json().marker)}`, ctx.id);
  await aborted(ctx.signal);
  throw ctx.signal.reason;
});

worker.handle('result', async (ctx) => ctx.payload);

worker.handle('result_size', async (ctx) => Buffer.alloc(ctx.json().bytes, 'x'));

worker.handle('progress', async (ctx) => {
  const { steps, marker } = ctx.json();
  for (let i = 1; i <= steps; i++) ctx.progress(i / steps, `step ${i} of ${steps}`);
  writeMarker(`started-${safeName(marker)}`, ctx.id);
  await aborted(ctx.signal);
  throw ctx.signal.reason;
});

worker.handle('parents', async (ctx) =>
  ctx.parentResults.map((p) => ({ job_id: Number(p.jobId), type: p.type, state: p.state, result: p.result.toString('utf8') })),
);

console.error(`conformance worker state dir ${stateDir}`);
worker.installSignalHandlers();
worker.run().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
