'use strict';

// The worker stream's codec against @grpc/proto-loader's: the same bytes either way.

const test = require('node:test');
const assert = require('node:assert/strict');
// The Long class protobufjs decodes int64 into (the package 'long', which it depends on).
const { Long } = require('protobufjs').util;
const { loadJobwire, workerStream, int64String } = require('../src/proto');

const method = () => loadJobwire().WorkerService.service.Connect;

/**
 * buf as the broker sends it, and with a field this library does not know after it: that takes
 * the whole decoding instead of the partial one the worker stream uses.
 */
const withAndWithoutUnknownField = (buf) => [buf, Buffer.concat([buf, Buffer.from([(99 << 3) & 0x7f | 0x80, 99 >> 4, 1])])];

test('every request the worker sends encodes as proto-loader encodes it', () => {
  const { serialize } = workerStream();
  const ref = (jobId) => ({ jobId, leaseToken: 'tok' });
  const messages = [];
  for (const id of ['1', '0', '-5', '9007199254740991', '9007199254740993', '9223372036854775807']) {
    messages.push({ started: ref(id) });
    messages.push({ result: { ...ref(id), success: {} } });
  }
  messages.push(
    { result: { ...ref('3'), failure: { kind: 'FAILURE_KIND_FATAL', errorType: 'TypeError', message: 'm', details: 'd' } } },
    {
      result: {
        ...ref('4'),
        failure: { kind: 'FAILURE_KIND_TRANSIENT', errorType: 'E', message: '', details: '', retryAfter: { seconds: 7, nanos: 0 } },
      },
    },
    { hello: { workerId: 'w', jobTypes: ['a', 'b'], queues: [], capacity: 8, held: [ref('9')], movable: true } },
    { heartbeat: { leases: [ref('1'), ref('2')] } },
    { release: { ...ref('5'), reason: 'worker is at capacity' } },
    { drain: {} },
  );
  // Every one of them in a batch, and a batch of each alone.
  const batchable = messages.filter((m) => !m.hello && !m.drain);
  messages.push({ batch: { messages: batchable } }, ...batchable.map((m) => ({ batch: { messages: [m] } })));
  for (const msg of messages) {
    assert.deepEqual(serialize(msg), method().requestSerialize(msg), JSON.stringify(msg));
  }
});

test('responses other than an Assignment decode as proto-loader decodes them', () => {
  const { deserialize } = workerStream();
  const messages = [
    { resultAck: { jobId: '12', leaseToken: 't', decision: 'DECISION_RETRY', retryAt: { seconds: '100', nanos: 1 } } },
    { resultAck: { jobId: '9007199254740993', leaseToken: 't', decision: 'DECISION_SUCCEEDED' } },
    { resultAck: { jobId: '-3', leaseToken: 't', decision: 'DECISION_DEAD', deadReason: 'DEAD_REASON_FATAL' } },
    { cancel: { jobId: '9007199254740993', leaseToken: 't', reason: 'CANCEL_REASON_TIMEOUT' } },
    { heartbeatAck: { extended: [{ jobId: '1', leaseToken: 'a' }] } },
    { refused: { jobId: '2', leaseToken: 'b', refusedMessage: 'REFUSED_MESSAGE_RESULT', code: 14, message: 'busy' } },
    { welcome: { sessionId: 's', leaseDuration: { seconds: '30', nanos: 0 }, lost: [] } },
    { drain: { reason: 'moving' } },
  ];
  messages.push({ batch: { messages: messages.filter((m) => !m.welcome) } });
  for (const msg of messages) {
    const buf = method().responseSerialize(msg);
    assert.deepEqual(deserialize(buf), method().responseDeserialize(buf), JSON.stringify(msg));
  }
});

test('int64String', () => {
  const cases = [
    ['42', '42'],
    [42, '42'],
    [Long.fromString('0'), '0'],
    [Long.fromString('-1'), '-1'],
    [Long.fromString('4294967296'), '4294967296'],
    [Long.fromString('-4294967297'), '-4294967297'],
    [Long.fromString('9007199254740991'), '9007199254740991'],
    [Long.fromString('9007199254740993'), '9007199254740993'],
    [Long.fromString('-9223372036854775808'), '-9223372036854775808'],
    [Long.fromString('18446744073709551615', true), '18446744073709551615'],
  ];
  for (const [v, want] of cases) assert.equal(int64String(v), want, String(v));
});

test('an Assignment decodes to what JobContext reads, and its whole Job when asked', () => {
  const { deserialize, plainJob } = workerStream();
  const assignment = {
    job: {
      id: '9007199254740993',
      type: 't',
      queue: 'q',
      payload: Buffer.from('{"a":1}'),
      state: 'JOB_STATE_RUNNING',
      maxAttempts: 5,
      createdAt: { seconds: '1700000000', nanos: 5 },
      metadata: { traceparent: 'tp' },
      attemptHistory: [{ number: 1, workerId: 'w0', outcome: 'ATTEMPT_OUTCOME_FAILED' }],
    },
    attempt: 2,
    leaseToken: 'tok',
    leaseDeadline: { seconds: '1700000030', nanos: 0 },
    attemptTimeout: { seconds: '90', nanos: 0 },
  };
  const buf = method().responseSerialize({ assignment });
  const want = method().responseDeserialize(buf).assignment;
  for (const bytes of withAndWithoutUnknownField(buf)) {
    const got = deserialize(bytes);
    assert.equal(got.message, 'assignment');
    const a = got.assignment;
    assert.deepEqual(
      [int64String(a.job.id), a.job.type, a.job.queue, a.job.payload, a.job.maxAttempts, { ...a.job.metadata }],
      ['9007199254740993', 't', 'q', assignment.job.payload, 5, { traceparent: 'tp' }],
    );
    assert.deepEqual([a.attempt, a.leaseToken, Number(a.attemptTimeout.seconds)], [2, 'tok', 90]);
    assert.deepEqual(plainJob(a), want.job);
  }
});

test('a batch of responses is unpacked in order, its Assignments read as one alone is', () => {
  const { deserialize, plainJob } = workerStream();
  const assignment = (id) => ({
    job: { id, type: 't', queue: 'q', payload: Buffer.from(id), state: 'JOB_STATE_RUNNING', maxAttempts: 3 },
    attempt: 1,
    leaseToken: `tok${id}`,
    attemptTimeout: { seconds: '0', nanos: 0 },
  });
  const messages = [
    { assignment: assignment('1') },
    { resultAck: { jobId: '7', leaseToken: 't', decision: 'DECISION_SUCCEEDED' } },
    { assignment: assignment('9007199254740993') },
    { cancel: { jobId: '1', leaseToken: 'tok1', reason: 'CANCEL_REASON_REQUESTED' } },
  ];
  const buf = method().responseSerialize({ batch: { messages } });
  const want = method().responseDeserialize(buf).batch.messages;
  for (const bytes of withAndWithoutUnknownField(buf)) {
    const got = deserialize(bytes);
    assert.equal(got.message, 'batch');
    assert.deepEqual(got.batch.messages.map((m) => m.message), ['assignment', 'resultAck', 'assignment', 'cancel']);
    for (const i of [0, 2]) {
      const a = got.batch.messages[i].assignment;
      assert.deepEqual([int64String(a.job.id), a.leaseToken, Buffer.from(a.job.payload)], [want[i].assignment.job.id, want[i].assignment.leaseToken, want[i].assignment.job.payload]);
      assert.deepEqual(plainJob(a), want[i].assignment.job);
    }
    assert.deepEqual(got.batch.messages[1], want[1]);
    assert.deepEqual(got.batch.messages[3], want[3]);
  }
});
