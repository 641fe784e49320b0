'use strict';

/**
 * Reconnect backoff: exponential growth with full jitter. A uniform draw between zero and the
 * exponential ceiling spreads the reconnects of many workers after a broker restart.
 */
class Backoff {
  /**
   * @param {{baseMs?: number, capMs?: number, random?: () => number}} [opts]
   */
  constructor({ baseMs = 200, capMs = 30000, random = Math.random } = {}) {
    if (!(baseMs > 0) || !(capMs >= baseMs)) throw new RangeError('Backoff: need 0 < baseMs <= capMs');
    this.baseMs = baseMs;
    this.capMs = capMs;
    this.random = random;
    this.failures = 0;
  }

  /**
   * The largest delay after `failures` consecutive failures (failures >= 1).
   * @param {number} failures
   */
  ceiling(failures) {
    const exp = Math.min(Math.max(failures - 1, 0), 62);
    return Math.min(this.capMs, this.baseMs * 2 ** exp);
  }

  /** Record one more failure and return how many milliseconds to wait before the next try. */
  next() {
    this.failures += 1;
    return this.random() * this.ceiling(this.failures);
  }

  /** Forget past failures, after a connection succeeded. */
  reset() {
    this.failures = 0;
  }
}

module.exports = { Backoff };
