'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const {
  classify,
  toFailure,
  FatalError,
  RetryAfterError,
  retryAfter,
  errorTypeName,
  durationToMs,
  FAILURE_KIND_FATAL: FATAL,
  FAILURE_KIND_TRANSIENT: TRANSIENT,
} = require('../src/errors');

class DbError extends Error {}
class NamedError extends Error {
  constructor(m) {
    super(m);
    this.name = 'CustomName';
  }
}
class BadInput extends TypeError {}

function jsonError() {
  try {
    JSON.parse('{nope');
  } catch (err) {
    return err;
  }
  throw new Error('JSON.parse accepted bad input');
}

test('classify maps error types to failure kinds', () => {
  const cases = [
    ['TypeError', new TypeError('t'), FATAL],
    ['ReferenceError', new ReferenceError('r'), FATAL],
    ['SyntaxError', jsonError(), FATAL],
    ['RangeError', new RangeError('r'), FATAL],
    ['FatalError', new FatalError('f'), FATAL],
    ['TypeError', new BadInput('subclass of TypeError'), FATAL],
    ['Error', new Error('e'), TRANSIENT],
    ['DbError', new DbError('db'), TRANSIENT],
    ['CustomName', new NamedError('n'), TRANSIENT],
    ['RetryAfterError', new RetryAfterError(1000), TRANSIENT],
    ['string', 'thrown string', TRANSIENT],
    ['undefined', undefined, TRANSIENT],
  ];
  for (const [name, err, kind] of cases) {
    const c = classify(err);
    assert.equal(c.kind, kind, name);
    assert.equal(c.errorType, name, name);
  }
});

test('classify keeps message and stack', () => {
  const c = classify(new TypeError('bad payload'));
  assert.equal(c.message, 'bad payload');
  assert.match(c.details, /TypeError: bad payload\n\s+at /);
  assert.equal(c.retryAfterMs, undefined);
  assert.equal(classify('plain').message, 'plain');
});

test('retry-after is transient and reaches the wire as a Duration', () => {
  const c = classify(new RetryAfterError(2500, 'rate limited'));
  assert.equal(c.kind, TRANSIENT);
  assert.equal(c.message, 'rate limited');
  assert.deepEqual(toFailure(c).retryAfter, { seconds: '2', nanos: 500_000_000 });
  assert.equal(toFailure(classify(new Error('x'))).retryAfter, undefined);
});

test('retryAfter marks any error and keeps its type', () => {
  const err = retryAfter(new TypeError('would be fatal'), 1000);
  const c = classify(err);
  assert.equal(c.kind, TRANSIENT);
  assert.equal(c.errorType, 'TypeError');
  assert.equal(c.retryAfterMs, 1000);
  assert.throws(() => retryAfter(new Error('x'), -1), RangeError);
  assert.throws(() => new RetryAfterError(Number.NaN), RangeError);
});

test('errorTypeName prefers a set name, then the constructor', () => {
  assert.equal(errorTypeName(new DbError('x')), 'DbError');
  assert.equal(errorTypeName(new NamedError('x')), 'CustomName');
  assert.equal(errorTypeName(null), 'null');
  assert.equal(errorTypeName(42), 'number');
});

test('durationToMs reads seconds as a string, a number or a decoded Long', () => {
  const { Long } = require('protobufjs').util;
  assert.equal(durationToMs(undefined), 0);
  assert.equal(durationToMs({ seconds: '90', nanos: 500000000 }), 90500);
  assert.equal(durationToMs({ seconds: 2, nanos: 0 }), 2000);
  assert.equal(durationToMs({ seconds: Long.fromNumber(30), nanos: 1000000 }), 30001);
  assert.equal(durationToMs({ nanos: 250000000 }), 250);
});
