'use strict';

/**
 * How a job's progress reports are thinned out before they reach the broker.
 *
 * A handler may report progress as often as it likes (every row of a million-row import); the
 * broker keeps only the newest report, so the worker sends at most one per job per interval (a
 * second), and the last one always: a report held back goes out when the interval is over
 * (unless a newer one replaced it first), or right before the job's result if that comes first.
 * Nothing goes after the result (docs/protocol.md).
 */

/** The least time between two progress reports of one job. */
const PROGRESS_INTERVAL_MS = 1000;

/** The longest progress message the broker takes, in bytes of UTF-8 (Progress.message). */
const MAX_PROGRESS_MESSAGE_BYTES = 256;

/**
 * At most one report per interval, the last one always; nothing once closed. Time is passed in
 * (milliseconds of a monotonic clock), so that tests move it by hand.
 * @template R
 */
class ProgressThrottle {
  /** @param {number} [intervalMs] */
  constructor(intervalMs = PROGRESS_INTERVAL_MS) {
    this.intervalMs = intervalMs;
    /** @type {number | undefined} */
    this.sentAt = undefined;
    /** @type {R | undefined} */
    this.pending = undefined;
    this.armed = false;
    this.closed = false;
  }

  /**
   * Offer a report at now.
   * @param {number} now
   * @param {R} report
   * @returns {{send?: R, dueAt?: number}} what to send at once, and when to call due() for a
   *   report held back (absent: a flush is already scheduled, or none is needed)
   */
  offer(now, report) {
    if (this.closed) return {};
    if (this.sentAt === undefined || now >= this.sentAt + this.intervalMs) {
      this.sentAt = now;
      this.pending = undefined;
      return { send: report };
    }
    this.pending = report;
    if (this.armed) return {};
    this.armed = true;
    return { dueAt: this.sentAt + this.intervalMs };
  }

  /**
   * The held-back report to send now, if one is still waiting.
   * @param {number} now
   * @returns {R | undefined}
   */
  due(now) {
    this.armed = false;
    const report = this.pending;
    this.pending = undefined;
    if (this.closed || report === undefined) return undefined;
    this.sentAt = now;
    return report;
  }

  /**
   * Stop: the job's result goes next (or the job is gone). Returns the report held back, to send
   * before the result; later offers are dropped.
   * @returns {R | undefined}
   */
  close() {
    const report = this.closed ? undefined : this.pending;
    this.closed = true;
    this.pending = undefined;
    return report;
  }
}

/**
 * fraction as a number in 0..1, or undefined; anything else is a RangeError naming it.
 * @param {number | null | undefined} fraction
 */
function checkFraction(fraction) {
  if (fraction === undefined || fraction === null) return undefined;
  if (typeof fraction !== 'number' || !(fraction >= 0 && fraction <= 1)) {
    throw new RangeError(`progress fraction ${fraction} is not between 0 and 1`);
  }
  return fraction;
}

/**
 * message cut to MAX_PROGRESS_MESSAGE_BYTES of UTF-8, at a character boundary: a progress line is
 * for people, and a long one is better shortened than refused.
 * @param {string | undefined} message
 */
function clipMessage(message) {
  const m = message === undefined || message === null ? '' : String(message);
  const b = Buffer.from(m, 'utf8');
  if (b.length <= MAX_PROGRESS_MESSAGE_BYTES) return m;
  let end = MAX_PROGRESS_MESSAGE_BYTES;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--; // back to the start of a character
  return b.subarray(0, end).toString('utf8');
}

/**
 * A handler's result as the bytes to send: a Buffer or Uint8Array as it is, a string as UTF-8,
 * undefined or null as no result, anything else as JSON.
 * @param {unknown} value
 * @returns {Buffer | undefined}
 */
function encodeResult(value) {
  if (value === undefined || value === null) return undefined;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  const json = JSON.stringify(value);
  if (json === undefined) throw new TypeError(`a result of type ${typeof value} cannot be sent as JSON`);
  return Buffer.from(json, 'utf8');
}

module.exports = { ProgressThrottle, PROGRESS_INTERVAL_MS, MAX_PROGRESS_MESSAGE_BYTES, checkFraction, clipMessage, encodeResult };
