'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backoff } = require('../src/backoff');

test('ceiling doubles then caps', () => {
  const b = new Backoff({ baseMs: 500, capMs: 4000 });
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => b.ceiling(n)), [500, 1000, 2000, 4000, 4000, 4000]);
  assert.equal(new Backoff({ baseMs: 1, capMs: 60 }).ceiling(10000), 60);
});

test('full jitter scales the ceiling and reset starts over', () => {
  const draws = [0, 0.5, 0.999, 0.5];
  const b = new Backoff({ baseMs: 1000, capMs: 8000, random: () => draws.shift() });
  assert.equal(b.next(), 0);
  assert.equal(b.next(), 1000);
  assert.ok(Math.abs(b.next() - 3996) < 1e-9);
  b.reset();
  assert.equal(b.next(), 500);
});

test('rejects bad config', () => {
  for (const [baseMs, capMs] of [[0, 1], [-1, 1], [2, 1]]) {
    assert.throws(() => new Backoff({ baseMs, capMs }), RangeError);
  }
});
