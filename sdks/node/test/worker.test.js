'use strict';

// Drives the Worker against a scripted in-process broker on loopback.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const { Worker, JobContext, CancelReason, Backoff, RetryAfterError, loadJobwire } = require('../src/index');
const { leaseMarginMs, MIN_MARGIN_MS, MAX_MARGIN_MS } = require('../src/lease');

const WAIT_MS = 5000; // upper bound for anything the worker should do promptly
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** An unbounded async queue: push never blocks, shift waits up to WAIT_MS. */
class AsyncQueue {
  constructor() {
    this.items = [];
    this.waiters = [];
  }

  push(v) {
    const w = this.waiters.shift();
    if (w) w(v);
    else this.items.push(v);
  }

  shift(what) {
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(done), 1);
        reject(new Error(`timed out waiting for ${what}`));
      }, WAIT_MS);
      const done = (v) => {
        clearTimeout(t);
        resolve(v);
      };
      this.waiters.push(done);
    });
  }
}

/** One Connect stream as the fake broker sees it. */
class Stream {
  constructor(call) {
    this.call = call;
    this.inbox = new AsyncQueue();
    /** The kinds of each gRPC message the worker sent: a batch as the list of its messages'. */
    this.frames = [];
    // A batch is unpacked, as the broker does: recv() sees its messages one by one.
    call.on('data', (m) => {
      if (m.message === 'batch') {
        this.frames.push(m.batch.messages.map((x) => x.message));
        for (const x of m.batch.messages) this.inbox.push(x);
      } else {
        this.frames.push(m.message);
        this.inbox.push(m);
      }
    });
    call.on('end', () => this.inbox.push(null));
    call.on('error', () => {});
  }

  /** The worker's next message (null once it half-closed), checked to be of kind. */
  async recv(kind) {
    for (;;) {
      const msg = await this.inbox.shift(kind || 'a message');
      if (msg === null) {
        if (kind) throw new Error(`stream closed while waiting for ${kind}`);
        return null;
      }
      if (msg.message === 'heartbeat' && kind !== 'heartbeat') continue;
      if (kind && msg.message !== kind) throw new Error(`expected ${kind}, got ${msg.message}: ${JSON.stringify(msg)}`);
      return kind ? msg[kind] : msg;
    }
  }

  send(msg) {
    this.call.write(msg);
  }

  welcome({ heartbeatMs = 60000, lost = [], leaseMs = 30000, maxResultBytes = 0 } = {}) {
    const duration = (ms) => ({ seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });
    this.send({
      welcome: {
        sessionId: 's',
        leaseDuration: duration(leaseMs),
        heartbeatInterval: duration(heartbeatMs),
        lost,
        maxResultBytes,
      },
    });
  }

  /** End the stream cleanly from the broker's side. */
  close() {
    this.call.end();
  }

  /** Break the stream with a status code. */
  fail(code = grpc.status.UNAVAILABLE) {
    this.call.emit('error', { code, details: 'scripted failure' });
  }
}

async function setup(t, workerOpts = {}) {
  const pkg = loadJobwire();
  const streams = new AsyncQueue();
  const server = new grpc.Server();
  server.addService(pkg.WorkerService.service, { Connect: (call) => streams.push(new Stream(call)) });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  let unblock;
  const unblocked = new Promise((resolve) => {
    unblock = resolve;
  });
  const seenCancel = [];
  const worker = new Worker({
    address: `127.0.0.1:${port}`,
    workerId: 'w1',
    capacity: 2,
    backoff: new Backoff({ baseMs: 10, capMs: 50 }),
    resendDelayMs: 10,
    logger: quiet,
    ...workerOpts,
  });
  worker.handle('echo', async (ctx) => {
    ctx.json();
  });
  worker.handle('fatal', async () => {
    throw new TypeError('wrong type');
  });
  worker.handle('later', async () => {
    throw new RetryAfterError(7000);
  });
  // Runs until the test unblocks it or the job is cancelled.
  worker.handle('block', (ctx) =>
    new Promise((resolve, reject) => {
      unblocked.then(resolve);
      ctx.signal.addEventListener('abort', () => {
        seenCancel.push(ctx.cancelReason);
        reject(ctx.signal.reason);
      });
    }),
  );
  let running = false; // worker.run() has not returned
  t.after(() => {
    unblock();
    // A test that failed midway leaves the worker running, which would keep the file's
    // process, and the whole run, alive.
    if (running) worker.shutdown('test over');
    server.forceShutdown();
  });

  const b = { worker, streams, unblock, seenCancel };
  /** Run the worker and answer its Hello; returns {s, hello}. */
  b.start = async (welcomeOpts) => {
    running = true;
    b.done = worker.run();
    b.done.catch(() => {}).finally(() => {
      running = false;
    });
    const s = await streams.shift('a stream');
    const hello = await s.recv('hello');
    s.welcome(welcomeOpts);
    return { s, hello };
  };
  /** Shut down and check the Drain, the half-close and that run() resolves. */
  b.stopAndExpectDrain = async (s) => {
    worker.shutdown('test');
    await s.recv('drain');
    assert.equal(await s.recv(), null);
    s.close();
    await b.done;
  };
  return b;
}

const assignment = (id, type = 'echo', payload = '{}') => ({
  assignment: {
    job: { id: String(id), type, payload: Buffer.from(payload), maxAttempts: 4 },
    attempt: 1,
    leaseToken: String(id * 100),
  },
});
const ack = (id) => ({ resultAck: { jobId: String(id), leaseToken: String(id * 100), decision: 'DECISION_SUCCEEDED' } });
const refused = (id, what, code) => ({
  refused: { jobId: String(id), leaseToken: String(id * 100), refusedMessage: what, code },
});
const until = async (cond) => {
  const end = Date.now() + WAIT_MS;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setImmediate(r));
  }
};

test('the worker announces that it accepts batches', async (t) => {
  const b = await setup(t);
  const { s, hello } = await b.start();
  assert.equal(hello.acceptsBatches, true);
  await b.stopAndExpectDrain(s);
});

test('a batch from the broker is handled in order', async (t) => {
  const b = await setup(t, { capacity: 2 });
  const { s } = await b.start();
  // The third Assignment finds both slots taken; the Cancel frees one of them before the fourth.
  const cancel = { cancel: { jobId: '1', leaseToken: '100', reason: 'CANCEL_REASON_REQUESTED' } };
  s.send({ batch: { messages: [assignment(1, 'block'), assignment(2, 'block'), assignment(3), cancel, assignment(4, 'block')] } });
  const sent = [];
  for (let i = 0; i < 4; i++) {
    const m = await s.recv();
    sent.push([m.message, m[m.message].jobId]);
  }
  assert.deepEqual(sent, [
    ['started', '1'],
    ['started', '2'],
    ['release', '3'],
    ['started', '4'],
  ]);
  // Job 1 was cancelled before its handler could run: it never ran.
  assert.deepEqual(b.seenCancel, []);
  b.unblock();
  const results = new Set();
  for (let i = 0; i < 2; i++) results.add((await s.recv('result')).jobId);
  assert.deepEqual([...results].sort(), ['2', '4']);
  s.send({ batch: { messages: [ack(2), ack(4)] } });
  await b.stopAndExpectDrain(s);
});

test('what is ready in one turn goes as one batch; a lone message goes unwrapped', async (t) => {
  const b = await setup(t, { capacity: 3 });
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  assert.deepEqual(s.frames, ['hello', 'started']);
  // The Started of each Assignment of one frame are written together, before any handler runs.
  const queuedAtStart = [];
  b.worker.handlers.set('block2', (ctx) => {
    queuedAtStart.push(b.worker.session.out.some((m) => m.started?.jobId === ctx.id));
    return b.worker.handlers.get('block')(ctx);
  });
  s.send({ batch: { messages: [assignment(2, 'block2'), assignment(3, 'block2')] } });
  await s.recv('started');
  await s.recv('started');
  assert.deepEqual(s.frames.slice(2), [['started', 'started']]);
  // Handlers that finish in one turn send their Results together.
  b.unblock();
  for (let i = 0; i < 3; i++) await s.recv('result');
  assert.deepEqual(s.frames.slice(3), [['result', 'result', 'result']]);
  assert.deepEqual(queuedAtStart, [false, false]);
  s.send({ batch: { messages: [ack(1), ack(2), ack(3)] } });
  // Drain goes alone.
  await b.stopAndExpectDrain(s);
  assert.deepEqual(s.frames.slice(4), ['drain']);
});

test('no batch holds more than 1024 messages', () => {
  const worker = new Worker({ logger: quiet });
  const writes = [];
  const sess = { call: { write: (m) => writes.push(m) }, closing: false, out: [] };
  worker.session = sess;
  for (let i = 0; i < 2049; i++) sess.out.push({ started: { jobId: String(i), leaseToken: 't' } });
  worker.flush(sess);
  assert.deepEqual(
    writes.map((m) => (m.batch ? m.batch.messages.length : m.started.jobId)),
    [1024, 1024, '2048'],
  );
  assert.deepEqual([writes[0].batch.messages[0].started.jobId, writes[1].batch.messages[0].started.jobId], ['0', '1024']);
});

test('no batch gathers more than a mebibyte', () => {
  // Results near the result limit that are ready together go one by one; smaller ones share
  // frames up to 1 MiB, and a frame never reaches what the broker refuses.
  const worker = new Worker({ logger: quiet });
  const writes = [];
  const sess = { call: { write: (m) => writes.push(m) }, closing: false, out: [] };
  worker.session = sess;
  const result = (n) => ({ result: { jobId: '1', leaseToken: 't', success: { result: Buffer.alloc(n) } } });
  sess.out.push(result(900 << 10), result(900 << 10), result(300 << 10), result(300 << 10), result(300 << 10),
    result(300 << 10), { started: { jobId: '2', leaseToken: 't' } });
  worker.flush(sess);
  assert.deepEqual(writes.map((m) => (m.batch ? m.batch.messages.length : 1)), [1, 1, 3, 2]);
  assert.equal(writes[0].result.success.result.length, 900 << 10);
});

test('a movable worker says so in its hello', async (t) => {
  const b = await setup(t, { movable: true });
  const { s, hello } = await b.start();
  assert.equal(hello.movable, true);
  await b.stopAndExpectDrain(s);
});

test('hello, started, result, ack', async (t) => {
  const b = await setup(t, { queues: ['q1'] });
  const { s, hello } = await b.start();
  assert.equal(hello.workerId, 'w1');
  assert.deepEqual(hello.jobTypes, ['block', 'echo', 'fatal', 'later']);
  assert.deepEqual(hello.queues, ['q1']);
  assert.equal(hello.capacity, 2);
  assert.deepEqual(hello.held, []);
  assert.equal(hello.movable, false);

  s.send(assignment(1));
  const started = await s.recv('started');
  assert.deepEqual([started.jobId, started.leaseToken], ['1', '100']);
  const result = await s.recv('result');
  assert.equal(result.outcome, 'success');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('the handler sees the job metadata and its trace context', async (t) => {
  const b = await setup(t);
  let seen;
  b.worker.handle('traced', async (ctx) => {
    seen = { metadata: ctx.metadata, traceparent: ctx.traceparent };
  });
  const { s } = await b.start();
  const parent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const a = assignment(3, 'traced');
  a.assignment.job.metadata = { traceparent: parent, tenant: 'acme' };
  s.send(a);
  await s.recv('started');
  const result = await s.recv('result');
  assert.equal(result.outcome, 'success');
  s.send(ack(3));
  assert.deepEqual(seen, { metadata: { traceparent: parent, tenant: 'acme' }, traceparent: parent });
  await b.stopAndExpectDrain(s);
});

test('the handler sees the job as the plain decoded Job, int64 as decimal strings', async (t) => {
  const b = await setup(t);
  let seen;
  b.worker.handle('whole', async (ctx) => {
    seen = { id: ctx.id, job: ctx.job, again: ctx.job, timeoutMs: ctx.attemptTimeoutMs };
  });
  const { s } = await b.start();
  const big = '9007199254740993'; // above 2^53: no double holds it
  const a = {
    assignment: {
      job: {
        id: big,
        type: 'whole',
        queue: 'q',
        payload: Buffer.from('{}'),
        state: 'JOB_STATE_RUNNING',
        maxAttempts: 3,
        createdAt: { seconds: '1700000000', nanos: 5 },
        metadata: { k: 'v' },
        attemptHistory: [{ number: 1, workerId: 'w0', outcome: 'ATTEMPT_OUTCOME_FAILED' }],
      },
      attempt: 2,
      leaseToken: 'tok',
      attemptTimeout: { seconds: '90', nanos: 0 },
    },
  };
  s.send(a);
  const started = await s.recv('started');
  assert.deepEqual([started.jobId, started.leaseToken], [big, 'tok']);
  const result = await s.recv('result');
  assert.deepEqual([result.jobId, result.outcome], [big, 'success']);
  s.send({ resultAck: { jobId: big, leaseToken: 'tok', decision: 'DECISION_SUCCEEDED' } });
  // What @grpc/proto-loader makes of the same bytes.
  const method = loadJobwire().WorkerService.service.Connect;
  const want = method.responseDeserialize(method.responseSerialize(a)).assignment.job;
  assert.equal(seen.id, big);
  assert.deepEqual(seen.job, want);
  assert.equal(seen.again, seen.job);
  assert.equal(seen.timeoutMs, 90000);
  await b.stopAndExpectDrain(s);
});

test('an empty payload reaches the handler as an empty Buffer', async (t) => {
  const b = await setup(t);
  let seen;
  b.worker.handle('empty', async (ctx) => {
    seen = { payload: ctx.payload, job: ctx.job.payload };
  });
  const { s } = await b.start();
  // As the broker sends it: proto3 leaves an empty field out.
  const a = assignment(4, 'empty');
  delete a.assignment.job.payload;
  s.send(a);
  await s.recv('started');
  assert.equal((await s.recv('result')).outcome, 'success');
  s.send(ack(4));
  assert.ok(Buffer.isBuffer(seen.payload), `payload is ${seen.payload?.constructor?.name}`);
  assert.equal(seen.payload.length, 0);
  assert.ok(Buffer.isBuffer(seen.job) && seen.job.length === 0);
  await b.stopAndExpectDrain(s);
});

test('a JobContext built from a plain assignment', () => {
  const job = { id: '7', type: 't', queue: 'q', payload: Buffer.from('{"a":1}'), maxAttempts: 2, metadata: { traceparent: 'x' } };
  const ctx = new JobContext({ job, attempt: 1, leaseToken: 'l', attemptTimeout: { seconds: '1', nanos: 500000000 } });
  assert.equal(ctx.job, job);
  assert.deepEqual([ctx.id, ctx.type, ctx.queue, ctx.attempt, ctx.maxAttempts, ctx.leaseToken], ['7', 't', 'q', 1, 2, 'l']);
  assert.equal(ctx.attemptTimeoutMs, 1500);
  assert.deepEqual(ctx.json(), { a: 1 });
  assert.equal(ctx.traceparent, 'x');
  assert.equal(ctx.cancelReason, undefined);
  assert.equal(ctx.signal.aborted, false);
  ctx._cancel(CancelReason.TIMEOUT);
  assert.equal(ctx.signal.aborted, true);
  assert.equal(ctx.cancelReason, CancelReason.TIMEOUT);
  assert.equal(ctx.signal.reason.reason, CancelReason.TIMEOUT);
});

test('a job cancelled before its handler reads the signal finds it aborted', () => {
  const ctx = new JobContext({ job: { id: '8', payload: Buffer.alloc(0) }, attempt: 1, leaseToken: 'l' });
  ctx._cancel(CancelReason.LEASE_LOST);
  assert.equal(ctx.cancelReason, CancelReason.LEASE_LOST);
  assert.equal(ctx.signal.aborted, true);
});

test('failures are classified on the wire', async (t) => {
  const b = await setup(t, { capacity: 3 });
  const { s } = await b.start();
  s.send(assignment(1, 'fatal'));
  s.send(assignment(2, 'later'));
  s.send(assignment(3, 'echo', '{not json'));
  const got = {};
  const started = new Set();
  while (Object.keys(got).length < 3) {
    const msg = await s.recv();
    if (msg.message === 'started') {
      started.add(msg.started.jobId);
      continue;
    }
    assert.equal(msg.message, 'result');
    assert.ok(started.has(msg.result.jobId), 'Result before Started');
    got[msg.result.jobId] = msg.result.failure;
    s.send(ack(Number(msg.result.jobId)));
  }
  assert.equal(got[1].kind, 'FAILURE_KIND_FATAL');
  assert.equal(got[1].errorType, 'TypeError');
  assert.equal(got[1].message, 'wrong type');
  assert.match(got[1].details, /TypeError: wrong type/);
  assert.equal(got[2].kind, 'FAILURE_KIND_TRANSIENT');
  assert.equal(got[2].errorType, 'RetryAfterError');
  assert.deepEqual([got[2].retryAfter.seconds, got[2].retryAfter.nanos], ['7', 0]);
  assert.equal(got[3].kind, 'FAILURE_KIND_FATAL');
  assert.equal(got[3].errorType, 'SyntaxError');
  await b.stopAndExpectDrain(s);
});

test('a result refused as UNAVAILABLE is sent again', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1));
  await s.recv('started');
  const first = await s.recv('result');
  s.send(refused(1, 'REFUSED_MESSAGE_RESULT', 14));
  assert.deepEqual(await s.recv('result'), first);
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('a result refused as FAILED_PRECONDITION is dropped', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1));
  await s.recv('started');
  await s.recv('result');
  s.send(refused(1, 'REFUSED_MESSAGE_RESULT', 9));
  // Dropping frees the slot, so shutdown completes without a ResultAck.
  await b.stopAndExpectDrain(s);
});

test('cancel aborts the handler signal and sends no result', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  s.send({ cancel: { jobId: '1', leaseToken: '100', reason: 'CANCEL_REASON_TIMEOUT' } });
  await until(() => b.seenCancel.length > 0);
  assert.deepEqual(b.seenCancel, ['timeout']);
  // The next message is the Drain, not a Result for the cancelled job.
  await b.stopAndExpectDrain(s);
});

test('the attempt timeout aborts the handler and reports timed_out', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  const a = assignment(1, 'block');
  a.assignment.attemptTimeout = { seconds: '0', nanos: 50e6 };
  s.send(a);
  await s.recv('started');
  const result = await s.recv('result');
  assert.deepEqual(b.seenCancel, ['timeout']);
  assert.equal(result.failure.timedOut, true);
  assert.equal(result.failure.kind, 'FAILURE_KIND_TRANSIENT');
  assert.equal(result.failure.errorType, 'JobCancelledError');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('an assignment beyond capacity is released', async (t) => {
  const b = await setup(t, { capacity: 1 });
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  s.send(assignment(2));
  const rel = await s.recv('release');
  assert.deepEqual([rel.jobId, rel.leaseToken], ['2', '200']);
  b.unblock();
  await s.recv('result');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('heartbeats name held leases', async (t) => {
  const b = await setup(t);
  const { s } = await b.start({ heartbeatMs: 20 });
  s.send(assignment(1, 'block'));
  await s.recv('started');
  let hb = await s.recv('heartbeat');
  while (hb.leases.length === 0) hb = await s.recv('heartbeat');
  assert.deepEqual(hb.leases, [{ jobId: '1', leaseToken: '100' }]);
  b.unblock();
  await s.recv('result');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('reconnect sends held leases and re-sends the unacknowledged result', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  s.fail();

  const s2 = await b.streams.shift('second stream');
  assert.deepEqual((await s2.recv('hello')).held, [{ jobId: '1', leaseToken: '100' }]);
  s2.welcome();
  // The first Started may have been lost with the stream: the job still runs, so it comes again.
  assert.equal((await s2.recv('started')).jobId, '1');
  b.unblock();
  const r = await s2.recv('result');
  assert.equal(r.jobId, '1');

  // The ack is lost with the stream: the result comes again on the next one.
  s2.fail();
  const s3 = await b.streams.shift('third stream');
  assert.deepEqual((await s3.recv('hello')).held, [{ jobId: '1', leaseToken: '100' }]);
  s3.welcome();
  assert.deepEqual(await s3.recv('result'), r);
  s3.send(ack(1));
  await b.stopAndExpectDrain(s3);
});

test('a lease lost while disconnected cancels the job', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  s.fail();
  const s2 = await b.streams.shift('second stream');
  await s2.recv('hello');
  s2.welcome({ lost: [{ jobId: '1', leaseToken: '100' }] });
  await until(() => b.seenCancel.length > 0);
  assert.deepEqual(b.seenCancel, ['lease_lost']);
  await b.stopAndExpectDrain(s2);
});

test('shutdown lets the running job finish and releases new work', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  b.worker.shutdown('test');
  await s.recv('drain');
  // An assignment that crossed the Drain on the wire is handed back unstarted.
  s.send(assignment(2));
  assert.equal((await s.recv('release')).jobId, '2');
  b.unblock();
  assert.equal((await s.recv('result')).outcome, 'success');
  s.send(ack(1));
  assert.equal(await s.recv(), null);
  s.close();
  await b.done;
});

test('the grace period cancels stuck jobs and reports them as transient', async (t) => {
  const b = await setup(t, { gracePeriodMs: 50 });
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  b.worker.shutdown('test');
  await s.recv('drain');
  const r = await s.recv('result');
  assert.equal(r.failure.kind, 'FAILURE_KIND_TRANSIENT');
  assert.equal(r.failure.errorType, 'WorkerShutdown');
  s.send(ack(1));
  assert.equal(await s.recv(), null);
  s.close();
  await b.done;
});

test('a DrainRequest closes the stream, then the worker reconnects', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send({ drain: { reason: 'broker restarting' } });
  assert.equal(await s.recv(), null);
  s.close();
  const s2 = await b.streams.shift('second stream');
  await s2.recv('hello');
  s2.welcome();
  await b.stopAndExpectDrain(s2);
});

test('INVALID_ARGUMENT stops run()', async (t) => {
  const b = await setup(t);
  const done = b.worker.run();
  const s = await b.streams.shift('a stream');
  await s.recv('hello');
  s.fail(grpc.status.INVALID_ARGUMENT);
  await assert.rejects(done, (err) => err.code === grpc.status.INVALID_ARGUMENT);
});

// The token and TLS options. Connecting over TLS and mutual TLS to the real broker is covered by
// the conformance suite (scenarios tls_token and mtls_token), which writes throwaway certificates.

test('the token is sent as bearer metadata', async (t) => {
  const b = await setup(t, { token: 'jw_abc_secret' });
  const { s } = await b.start();
  assert.deepEqual(s.call.metadata.get('authorization'), ['Bearer jw_abc_secret']);
  await b.stopAndExpectDrain(s);
});

test('without a token no authorization is sent', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  assert.deepEqual(s.call.metadata.get('authorization'), []);
  await b.stopAndExpectDrain(s);
});

test('UNAUTHENTICATED stops run()', async (t) => {
  const b = await setup(t, { token: 'jw_revoked' });
  const done = b.worker.run();
  const s = await b.streams.shift('a stream');
  await s.recv('hello');
  s.fail(grpc.status.UNAUTHENTICATED);
  await assert.rejects(done, (err) => err.code === grpc.status.UNAUTHENTICATED);
});

test('the worker grants the broker a fixed 1 MiB flow-control window and keeps no retry buffer', () => {
  // The default 64 KiB holds about two hundred Assignments, fewer than a worker of a few hundred
  // slots is sent at once.
  assert.equal(new Worker().channelOptions['grpc-node.flow_control_window'], 1 << 20);
  const named = new Worker({ tls: { serverName: 'broker.internal' } }).channelOptions;
  assert.equal(named['grpc-node.flow_control_window'], 1 << 20);
  assert.equal(named['grpc.ssl_target_name_override'], 'broker.internal');
  // No retry buffer: messages wait in the stream's queue, not in grpc-js's replay buffer.
  assert.equal(named['grpc.per_rpc_retry_buffer_size'], 0);
});

test('bad token and TLS options fail at construction', () => {
  assert.throws(() => new Worker({ token: 'two words' }), TypeError);
  assert.throws(() => new Worker({ tls: { cert: 'client.pem' } }), TypeError);
  assert.throws(() => new Worker({ tls: { ca: '/nonexistent/ca.pem' } }), /ENOENT/);
});

test('the lease margin is a tenth of the lease, within bounds', () => {
  const cases = [
    [30000, 10000, 3000], // the broker's defaults: a tenth
    [3000, 1000, 300],
    [1000, 333, MIN_MARGIN_MS], // a tenth would be too small
    [600000, 200000, MAX_MARGIN_MS], // a tenth would waste the lease
    [3000, 2900, 50], // half of what a heartbeat has left
    [1000, 2000, 0], // a heartbeat slower than the lease
  ];
  for (const [lease, heartbeat, want] of cases) {
    assert.equal(leaseMarginMs(lease, heartbeat), want, `leaseMarginMs(${lease}, ${heartbeat})`);
  }
});

test('a lease that runs out without an extension aborts the handler and sends no result', async (t) => {
  // The broker answers nothing, as a frozen one would: the handler is aborted once the lease
  // (1s, less its 250ms margin) has passed.
  const b = await setup(t);
  const { s } = await b.start({ leaseMs: 1000, heartbeatMs: 300 });
  const sent = performance.now();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  await until(() => b.seenCancel.length > 0);
  assert.ok(performance.now() - sent >= 700, `aborted after ${performance.now() - sent}ms, want at least 700`);
  assert.deepEqual(b.seenCancel, ['lease_lost']);
  // The job is forgotten: the next message is the Drain, not a Result.
  await b.stopAndExpectDrain(s);
});

test('an extension counts from the heartbeat, not from its answer', async (t) => {
  const b = await setup(t);
  const { s } = await b.start({ leaseMs: 2000, heartbeatMs: 100 });
  s.send(assignment(1, 'block'));
  await s.recv('started');
  const job = b.worker.jobs.get('1');
  const firstEnd = job.leaseEnd;
  let hb = await s.recv('heartbeat');
  while (hb.leases.length === 0) hb = await s.recv('heartbeat');
  const read = performance.now(); // the worker sent the heartbeat before this
  s.send({ heartbeatAck: { extended: hb.leases } });
  await until(() => job.leaseEnd !== firstEnd);
  assert.ok(job.leaseEnd <= read + 2000 - leaseMarginMs(2000, 100), `lease ends ${job.leaseEnd - read}ms after the heartbeat was read`);
  b.unblock();
  await s.recv('result');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('answered heartbeats keep the lease', async (t) => {
  // Twenty-five answered heartbeats, 100ms apart, carry the job past its 2s lease.
  const b = await setup(t);
  const { s } = await b.start({ leaseMs: 2000, heartbeatMs: 100 });
  s.send(assignment(1, 'block'));
  await s.recv('started');
  for (let answered = 0; answered < 25; ) {
    const hb = await s.recv('heartbeat');
    if (hb.leases.length === 0) continue;
    s.send({ heartbeatAck: { extended: hb.leases } });
    answered++;
  }
  assert.deepEqual(b.seenCancel, []);
  b.unblock();
  const result = await s.recv('result');
  assert.ok(result.success, `result ${JSON.stringify(result)}, want success`);
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

// ---- results, progress and parents' results ---------------------------------------------

test('a resolved value or setResult is sent as the result; bytes as they are, strings as UTF-8, the rest as JSON', async (t) => {
  const b = await setup(t);
  b.worker.handle('value', async (ctx) => ctx.json().return);
  b.worker.handle('set', async (ctx) => {
    ctx.setResult(Buffer.from([0, 1, 2]));
  });
  const { s } = await b.start({ maxResultBytes: 64 });
  const cases = [
    [1, 'value', JSON.stringify({ return: { n: 1 } }), Buffer.from('{"n":1}')],
    [2, 'value', JSON.stringify({ return: 'text' }), Buffer.from('text')],
    [3, 'set', '{}', Buffer.from([0, 1, 2])],
    [4, 'echo', '{}', Buffer.alloc(0)],
  ];
  for (const [id, type, payload, want] of cases) {
    s.send(assignment(id, type, payload));
    await s.recv('started');
    const r = await s.recv('result');
    assert.equal(r.outcome, 'success');
    assert.deepEqual(Buffer.from(r.success.result), want, `job ${id}`);
    s.send(ack(id));
  }
  await b.stopAndExpectDrain(s);
});

test("a result over the broker's limit is a FATAL ResultTooLarge naming both sizes", async (t) => {
  const b = await setup(t);
  b.worker.handle('value', async (ctx) => ctx.json().return);
  const { s } = await b.start({ maxResultBytes: 8 });
  s.send(assignment(1, 'value', JSON.stringify({ return: 'x'.repeat(9) })));
  await s.recv('started');
  const r = await s.recv('result');
  assert.equal(r.failure.kind, 'FAILURE_KIND_FATAL');
  assert.equal(r.failure.errorType, 'ResultTooLarge');
  assert.match(r.failure.message, /is 9 bytes, more than the broker's limit of 8 bytes/);
  s.send(ack(1));
  s.send(assignment(2, 'value', JSON.stringify({ return: 'x'.repeat(8) })));
  await s.recv('started');
  assert.equal(Buffer.from((await s.recv('result')).success.result).toString(), 'x'.repeat(8));
  s.send(ack(2));
  await b.stopAndExpectDrain(s);
});

/** A handler "steps" that reports five times at once, then once more and resolves when told to. */
function stepsHandler(b) {
  const h = {};
  const finished = new Promise((r) => {
    h.finish = r;
  });
  h.reported = new Promise((r) => {
    h.allReported = r;
  });
  b.worker.handle('steps', async (ctx) => {
    for (let i = 1; i <= 5; i++) ctx.progress(i / 5, `step ${i}`);
    h.allReported();
    await finished;
    ctx.progress(1, 'after the last');
    return 'done';
  });
  return h;
}

test('progress is throttled to one a second on the worker clock and the newest report held back is sent', async (t) => {
  const b = await setup(t);
  let now = 100000;
  b.worker.clock = () => now; // the throttle's clock, moved by hand
  b.worker.progressIntervalMs = 20; // the flush timer waits this long
  const h = stepsHandler(b);
  const { s } = await b.start();
  s.send(assignment(1, 'steps'));
  await s.recv('started');
  const first = await s.recv('progress');
  assert.deepEqual([first.jobId, first.leaseToken, first.fraction, first.message], ['1', '100', 0.2, 'step 1']);
  await h.reported;
  now += 20;
  const last = await s.recv('progress');
  assert.deepEqual([last.fraction, last.message], [1, 'step 5']);
  now += 20; // an interval after the flush: the next report is not held back
  h.finish();
  assert.equal((await s.recv('progress')).message, 'after the last');
  assert.equal(Buffer.from((await s.recv('result')).success.result).toString(), 'done');
  s.send(ack(1));
  await b.stopAndExpectDrain(s);
});

test('a progress report held back when the handler resolves goes right before the result, none after', async (t) => {
  const b = await setup(t);
  b.worker.clock = () => 100000; // never moves: every report after the first waits for a flush
  b.worker.progressIntervalMs = 3_600_000; // whose timer would fire only after the test
  const h = stepsHandler(b);
  const { s } = await b.start();
  s.send(assignment(1, 'steps'));
  await s.recv('started');
  assert.equal((await s.recv('progress')).message, 'step 1');
  await h.reported;
  const j = b.worker.jobs.get('1');
  h.finish();
  assert.equal((await s.recv('progress')).message, 'after the last');
  const r = await s.recv('result');
  assert.equal(Buffer.from(r.success.result).toString(), 'done');
  assert.deepEqual(s.frames.at(-1), ['progress', 'result'], 'the last report and the result share a batch frame');
  b.worker.progressDue(j); // as if its flush came now: it finds nothing to send
  s.send(ack(1));
  await b.stopAndExpectDrain(s); // the Drain is next, no Progress before it
});

test('the parents\' results of an assignment reach the handler in order', async (t) => {
  const b = await setup(t);
  let seen;
  b.worker.handle('report', async (ctx) => {
    seen = ctx.parentResults.map((p) => [p.jobId, p.type, p.result.toString(), p.state]);
    return ctx.parentResults[0].json();
  });
  const { s } = await b.start();
  const a = assignment(9, 'report');
  a.assignment.parentResults = [
    { jobId: '7', type: 'fetch', result: Buffer.from('{"rows":2}'), state: 'JOB_STATE_SUCCEEDED' },
    { jobId: '8', type: 'fetch', result: Buffer.alloc(0), state: 'JOB_STATE_CANCELLED' },
  ];
  s.send(a);
  await s.recv('started');
  const r = await s.recv('result');
  assert.deepEqual(seen, [
    ['7', 'fetch', '{"rows":2}', 'succeeded'],
    ['8', 'fetch', '', 'cancelled'],
  ]);
  assert.equal(Buffer.from(r.success.result).toString(), '{"rows":2}');
  s.send(ack(9));
  await b.stopAndExpectDrain(s);
});

test('a refused progress report is only logged unless the lease is stale', async (t) => {
  const b = await setup(t);
  const { s } = await b.start();
  s.send(assignment(1, 'block'));
  await s.recv('started');
  s.send(refused(1, 'REFUSED_MESSAGE_PROGRESS', 3)); // INVALID_ARGUMENT: the report broke a rule
  s.send(refused(1, 'REFUSED_MESSAGE_PROGRESS', 14)); // UNAVAILABLE: the next report replaces it
  s.send(assignment(2)); // read after the two refusals: once it ran, they were handled
  await s.recv('started');
  await s.recv('result');
  s.send(ack(2));
  assert.ok(b.worker.jobs.has('1'), 'the job runs on after a refused report');
  assert.deepEqual(b.seenCancel, []);
  s.send(refused(1, 'REFUSED_MESSAGE_PROGRESS', 9)); // FAILED_PRECONDITION: the lease is stale
  await until(() => b.seenCancel.length > 0);
  assert.deepEqual(b.seenCancel, ['lease_lost'], 'only the stale lease stopped the job');
  await b.stopAndExpectDrain(s); // no Result for the lost job
});
