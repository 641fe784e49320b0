'use strict';

/**
 * Failure classification: turning what a handler threw into the protocol's Failure.
 *
 * Only the worker knows whether an error is a code or payload bug (FATAL: the job goes to the
 * dead-letter queue at once) or a passing condition (TRANSIENT: the broker retries with backoff).
 * Retrying a bug only burns attempts, so JavaScript's "bug" error types are FATAL.
 */

const FAILURE_KIND_FATAL = 'FAILURE_KIND_FATAL';
const FAILURE_KIND_TRANSIENT = 'FAILURE_KIND_TRANSIENT';

/** Built-in error types that mean a bug in the handler or its payload (JSON.parse throws SyntaxError). */
const FATAL_ERROR_TYPES = [TypeError, ReferenceError, SyntaxError, RangeError];

/** Throw to send the job to the dead-letter queue without further retries. */
class FatalError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = 'FatalError';
  }
}

/**
 * Throw to fail transiently and ask the broker to retry after `ms` milliseconds. The broker uses
 * it instead of its computed backoff, still capped by its maximum delay.
 */
class RetryAfterError extends Error {
  /**
   * @param {number} ms
   * @param {string} [message]
   * @param {{cause?: unknown}} [options]
   */
  constructor(ms, message, options) {
    super(message || `retry after ${ms}ms`, options);
    this.name = 'RetryAfterError';
    this.retryAfterMs = checkMs(ms);
  }
}

/**
 * Mark any error as transient with a retry delay, keeping its own type name:
 * `throw retryAfter(err, 5000)`.
 * @template {Error} E
 * @param {E} err
 * @param {number} ms
 * @returns {E & {retryAfterMs: number}}
 */
function retryAfter(err, ms) {
  const e = /** @type {any} */ (err instanceof Error ? err : new Error(String(err)));
  e.retryAfterMs = checkMs(ms);
  return e;
}

function checkMs(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new RangeError('retry-after delay must be a finite number of milliseconds >= 0');
  }
  return ms;
}

/**
 * The language's name for the error's type: the `name` a class sets, else its constructor's name
 * (so `class DbError extends Error {}` reports "DbError"), else the typeof of a thrown non-error.
 * @param {unknown} err
 * @returns {string}
 */
function errorTypeName(err) {
  if (err === null || err === undefined) return String(err);
  if (typeof err !== 'object' && typeof err !== 'function') return typeof err;
  const e = /** @type {any} */ (err);
  const name = typeof e.name === 'string' ? e.name : '';
  const ctor = e.constructor && typeof e.constructor.name === 'string' ? e.constructor.name : '';
  if (name && name !== 'Error') return name;
  return ctor || name || 'Error';
}

/**
 * @typedef {object} Classified
 * @property {string} kind FAILURE_KIND_FATAL or FAILURE_KIND_TRANSIENT
 * @property {string} errorType
 * @property {string} message
 * @property {string} details stack trace
 * @property {number | undefined} retryAfterMs
 */

/**
 * Classify what a handler threw as FATAL or TRANSIENT and describe it for the broker.
 * @param {unknown} err
 * @returns {Classified}
 */
function classify(err) {
  const e = /** @type {any} */ (err);
  const isObj = e !== null && typeof e === 'object';
  const message = isObj ? String(e.message ?? '') : String(err);
  const details = isObj && typeof e.stack === 'string' ? e.stack : '';
  const errorType = errorTypeName(err);
  if (isObj && typeof e.retryAfterMs === 'number') {
    return { kind: FAILURE_KIND_TRANSIENT, errorType, message, details, retryAfterMs: e.retryAfterMs };
  }
  const fatal = err instanceof FatalError || FATAL_ERROR_TYPES.some((T) => err instanceof T);
  return {
    kind: fatal ? FAILURE_KIND_FATAL : FAILURE_KIND_TRANSIENT,
    errorType,
    message,
    details,
    retryAfterMs: undefined,
  };
}

/**
 * The wire Failure of a classified error.
 * @param {Classified} c
 */
function toFailure(c) {
  /** @type {Record<string, unknown>} */
  const f = { kind: c.kind, errorType: c.errorType, message: c.message, details: c.details };
  if (c.retryAfterMs !== undefined) f.retryAfter = msToDuration(c.retryAfterMs);
  return f;
}

/** @param {number} ms */
function msToDuration(ms) {
  const whole = Math.floor(ms);
  return { seconds: String(Math.floor(whole / 1000)), nanos: (whole % 1000) * 1e6 + Math.round((ms - whole) * 1e6) };
}

/**
 * @param {{seconds?: string|number|{toNumber(): number}, nanos?: number} | null | undefined} d
 *   seconds as a decimal string or number, or a Long as the worker stream decodes it (which
 *   Number() would convert through its slow toString)
 */
function durationToMs(d) {
  if (!d) return 0;
  const s = d.seconds;
  return (s && typeof s === 'object' ? s.toNumber() : Number(s || 0)) * 1000 + (d.nanos || 0) / 1e6;
}

module.exports = {
  FAILURE_KIND_FATAL,
  FAILURE_KIND_TRANSIENT,
  FATAL_ERROR_TYPES,
  FatalError,
  RetryAfterError,
  retryAfter,
  errorTypeName,
  classify,
  toFailure,
  msToDuration,
  durationToMs,
};
