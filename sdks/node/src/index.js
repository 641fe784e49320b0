'use strict';

/**
 * Jobwire worker library: run handlers for jobs pushed by a Jobwire broker.
 * See README.md for a walkthrough and docs/protocol.md in the repository for the wire protocol.
 */

const { Worker, JobContext, JobCancelledError, CancelReason } = require('./worker');
const { Backoff } = require('./backoff');
const {
  FatalError,
  RetryAfterError,
  retryAfter,
  classify,
  errorTypeName,
  FATAL_ERROR_TYPES,
  FAILURE_KIND_FATAL,
  FAILURE_KIND_TRANSIENT,
} = require('./errors');
const { loadJobwire } = require('./proto');
const { ConnectError, settingsFromEnv } = require('./connect');

module.exports = {
  Worker,
  JobContext,
  JobCancelledError,
  CancelReason,
  Backoff,
  FatalError,
  RetryAfterError,
  retryAfter,
  classify,
  errorTypeName,
  FATAL_ERROR_TYPES,
  FAILURE_KIND_FATAL,
  FAILURE_KIND_TRANSIENT,
  loadJobwire,
  ConnectError,
  settingsFromEnv,
};
