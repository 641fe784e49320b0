'use strict';

// The progress throttle on a clock moved by hand, and the checks of a report.

const test = require('node:test');
const assert = require('node:assert/strict');
const { ProgressThrottle, checkFraction, clipMessage, encodeResult } = require('../src/progress');

test('the first report goes at once, then one a second, the newest held back always', () => {
  const t = new ProgressThrottle(1000);
  assert.deepEqual(t.offer(10000, 'a'), { send: 'a' });
  assert.deepEqual(t.offer(10200, 'b'), { dueAt: 11000 }); // held back, one flush scheduled
  assert.deepEqual(t.offer(10500, 'c'), {});
  assert.equal(t.due(11000), 'c');
  assert.equal(t.due(11000), undefined);
  assert.deepEqual(t.offer(12500, 'd'), { send: 'd' });
});

test('close hands over the report held back, then nothing is sent', () => {
  const t = new ProgressThrottle(1000);
  t.offer(0, 'a');
  assert.deepEqual(t.offer(500, 'b'), { dueAt: 1000 });
  assert.equal(t.close(), 'b'); // the result goes next: b right before it
  assert.equal(t.due(1000), undefined);
  assert.deepEqual(t.offer(5000, 'c'), {});
  assert.equal(t.close(), undefined);
});

test('a fraction outside 0..1 is refused; a long message is cut at a character', () => {
  assert.equal(checkFraction(undefined), undefined);
  assert.equal(checkFraction(null), undefined);
  assert.equal(checkFraction(1), 1);
  for (const bad of [-0.1, 1.5, NaN, '0.5']) assert.throws(() => checkFraction(bad), /not between 0 and 1/);
  assert.equal(clipMessage('short'), 'short');
  assert.equal(clipMessage('é'.repeat(200)), 'é'.repeat(128));
  assert.equal(clipMessage('a' + 'é'.repeat(200)), 'a' + 'é'.repeat(127));
});

test('a result is encoded by its type', () => {
  assert.equal(encodeResult(undefined), undefined);
  assert.equal(encodeResult(null), undefined);
  assert.deepEqual(encodeResult(new Uint8Array([1, 2])), Buffer.from([1, 2]));
  assert.deepEqual(encodeResult('é'), Buffer.from('é'));
  assert.deepEqual(encodeResult({ a: [1] }), Buffer.from('{"a":[1]}'));
  assert.throws(() => encodeResult(() => 1), /cannot be sent as JSON/);
});
