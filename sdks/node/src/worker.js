'use strict';

/**
 * The Jobwire worker: one bidirectional stream to the broker, handlers run per job type.
 *
 * Node runs all of this on one thread, so protocol state needs no locks and the stream has a
 * single writer by construction. Handlers are async functions; cancellation reaches them as an
 * AbortSignal.
 */

const fs = require('node:fs');
const os = require('node:os');
const grpc = require('@grpc/grpc-js');
const { Backoff } = require('./backoff');
const protobuf = require('protobufjs');
const { workerStream, int64String } = require('./proto');
const { classify, toFailure, durationToMs, FAILURE_KIND_FATAL, FAILURE_KIND_TRANSIENT } = require('./errors');
const { leaseMarginMs } = require('./lease');
const { classifyConnectError, settingsFromEnv } = require('./connect');
const { ProgressThrottle, PROGRESS_INTERVAL_MS, checkFraction, clipMessage, encodeResult } = require('./progress');

/** Refused codes the protocol gives a meaning to (gRPC status codes). */
const CODE_FAILED_PRECONDITION = 9; // stale lease or finished job: drop the message
const CODE_UNAVAILABLE = 14; // storage busy: send the message again after a short backoff
const CODE_INVALID_ARGUMENT = 3; // a progress report broke a rule: the job goes on

/**
 * The HTTP/2 flow-control window this worker grants the broker, for its stream and its
 * connection, as the Go SDK and the broker do. The default of 64 KiB holds about two hundred
 * Assignments: at a capacity in the hundreds the broker would stall on the window, waiting for
 * the worker's WINDOW_UPDATE, while slots stand empty.
 */
const STREAM_WINDOW_BYTES = 1 << 20;

/**
 * The most bytes of one message read from the broker: a job with the largest payload (64 MiB)
 * and parents' results a broker may be set to take. gRPC reads 4 MiB unless told otherwise,
 * which an assignment passes on a broker whose operator raised max_payload_bytes or
 * max_result_bytes; the broker never sends more than it reads itself (docs/protocol.md).
 */
const MAX_RECEIVE_BYTES = 96 << 20;

/** The most messages one batch frame may hold (docs/protocol.md, "Batch frames"). */
const MAX_BATCH = 1024;
/**
 * The most bytes of messages one batch frame gathers: a message that would take it past this
 * starts the next frame, one larger goes alone. The broker reads 4 MiB a message by default, so
 * results near their limit that are ready together never add up to more.
 */
const MAX_BATCH_BYTES = 1 << 20;

/**
 * At least the bytes m takes encoded: its result and texts (UTF-8 takes at most three bytes a
 * UTF-16 unit), and room for its small fields.
 * @param {any} m
 */
function sizeBound(m) {
  let n = 64;
  const r = m.result;
  if (r && r.success && r.success.result) n += r.success.result.length;
  if (r && r.failure) n += 3 * ((r.failure.errorType || '').length + (r.failure.message || '').length + (r.failure.details || '').length);
  if (m.progress) n += 3 * (m.progress.message || '').length;
  return n;
}

/** Stream errors that no reconnect can fix: the worker's configuration is wrong. */
const PERMANENT_CODES = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNIMPLEMENTED,
]);

/** Why a job was cancelled, as found in ctx.cancelReason and ctx.signal.reason.reason. */
const CancelReason = Object.freeze({
  REQUESTED: 'requested', // someone called CancelJob
  TIMEOUT: 'timeout', // the attempt outlived its attempt timeout
  LEASE_LOST: 'lease_lost', // the broker no longer considers this worker the lease holder, or the lease ran out on this worker's clock
  SHUTDOWN: 'shutdown', // this worker is shutting down and its grace period ran out
});

const WIRE_CANCEL_REASONS = {
  CANCEL_REASON_REQUESTED: CancelReason.REQUESTED,
  CANCEL_REASON_TIMEOUT: CancelReason.TIMEOUT,
  CANCEL_REASON_LEASE_LOST: CancelReason.LEASE_LOST,
};

/** The reason an aborted JobContext.signal carries. */
class JobCancelledError extends Error {
  /** @param {string} reason one of CancelReason */
  constructor(reason) {
    super(`job cancelled: ${reason}`);
    this.name = 'JobCancelledError';
    this.reason = reason;
  }
}

/**
 * What a handler gets to know about the job it runs. Cancellation is cooperative: pass
 * `ctx.signal` to whatever supports an AbortSignal (fetch, timers/promises, child processes)
 * or check `ctx.signal.aborted`. After a cancel from the broker the job's outcome is already
 * recorded there, so whatever the handler returns or throws is dropped.
 */
class JobContext {
  /**
   * @param {any} assignment a jobwire.v1.Assignment: a plain object shaped by LOADER_OPTIONS
   *   (int64 as decimal strings), or as the worker's stream decodes it (int64 as Long, the Job
   *   read only in part; see workerStream() in proto.js), whose whole Job is decoded and
   *   converted to the plain shape only when read
   */
  constructor(assignment) {
    const job = assignment.job;
    const decoded = job instanceof protobuf.Message;
    /** The Assignment as given; `job` converts a decoded one's Job on first use. */
    this._assignment = assignment;
    this._plainJob = decoded ? undefined : job;
    /** @type {string} int64 as a decimal string */
    this.id = int64String(job.id);
    /** @type {string} */
    this.type = job.type;
    /** @type {string} */
    this.queue = job.queue;
    /**
     * An absent (empty) payload decodes as protobufjs's shared empty array, not a Buffer.
     * @type {Buffer}
     */
    this.payload = decoded && !Buffer.isBuffer(job.payload) ? Buffer.from(job.payload) : job.payload;
    /** @type {number} */
    this.attempt = assignment.attempt;
    /** @type {number} */
    this.maxAttempts = job.maxAttempts;
    /** @type {string} */
    this.leaseToken = assignment.leaseToken;
    /** @type {number | undefined} */
    this.attemptTimeoutMs = assignment.attemptTimeout ? durationToMs(assignment.attemptTimeout) : undefined;
    /**
     * What the producer attached to the job: its own keys, and the W3C trace context of the
     * enqueue under "traceparent" and "tracestate" (pass it to an OpenTelemetry propagator).
     * @type {Record<string, string>}
     */
    this.metadata = { ...(job.metadata || {}) };
    /** Made when the signal is first read or the job cancelled: most handlers never look. */
    this._controller = undefined;
    /** @type {Buffer | undefined} set by setResult() */
    this._result = undefined;
    /** Set by the worker: takes a checked (fraction, message). */
    this._progressSink = undefined;
    this._parents = undefined;
  }

  /**
   * The results of the jobs this one depends on, in the order the producer named them; empty for
   * a job without parents. `state` is 'succeeded', or 'dead' or 'cancelled' for a job enqueued
   * to run whatever its parents' outcome.
   * @returns {{jobId: string, type: string, result: Buffer, state: string, json: () => any}[]}
   */
  get parentResults() {
    this._parents ??= (this._assignment.parentResults || []).map((p) => {
      const result = Buffer.isBuffer(p.result) ? p.result : Buffer.from(p.result || []);
      const state = workerStream().stateName(p.state);
      return {
        jobId: int64String(p.jobId),
        type: p.type,
        result,
        state: state.replace(/^JOB_STATE_/, '').toLowerCase(),
        json: () => JSON.parse(result.toString('utf8')),
      };
    });
    return this._parents;
  }

  /**
   * Set the job's result, sent with its success: a Buffer or Uint8Array as it is, a string as
   * UTF-8, anything else as JSON. A handler may instead resolve to it; a resolved value other than
   * undefined wins. A result larger than the broker's limit (Welcome.max_result_bytes) fails the
   * attempt as FATAL, error type ResultTooLarge.
   * @param {unknown} value
   */
  setResult(value) {
    this._result = encodeResult(value);
  }

  /**
   * Report how far the job got: fraction from 0 to 1 (null when unknown) and/or a short message
   * (cut to 256 bytes of UTF-8). Call it as often as you like: the worker sends at most one
   * report per second, the last one always, and none after the job's result.
   * @param {number | null} [fraction]
   * @param {string} [message]
   */
  progress(fraction, message) {
    const f = checkFraction(fraction);
    this._progressSink?.(f, clipMessage(message));
  }

  /** The decoded jobwire.v1.Job, in the plain shape (int64 as decimal strings, enums as names). */
  get job() {
    this._plainJob ??= workerStream().plainJob(this._assignment);
    return this._plainJob;
  }

  /** @returns {AbortSignal} aborted when the job is cancelled */
  get signal() {
    this._controller ??= new AbortController();
    return this._controller.signal;
  }

  /** @returns {string | undefined} the producer's W3C traceparent, if the job carries one */
  get traceparent() {
    return this.metadata.traceparent;
  }

  /** Decode the payload as JSON. A malformed payload throws SyntaxError (FATAL). */
  json() {
    return JSON.parse(this.payload.toString('utf8'));
  }

  /** @returns {string | undefined} why the job was cancelled, if it was */
  get cancelReason() {
    const signal = this._controller?.signal;
    return signal?.aborted ? signal.reason.reason : undefined;
  }

  /** @param {string} reason */
  _cancel(reason) {
    if (!this.signal.aborted) this._controller.abort(new JobCancelledError(reason));
  }
}

/**
 * The FATAL failure of an attempt whose result the broker would not store: retrying produces the
 * same result.
 * @param {string} jobId
 * @param {number} size
 * @param {number} limit
 */
function resultTooLarge(jobId, size, limit) {
  return {
    kind: FAILURE_KIND_FATAL,
    errorType: 'ResultTooLarge',
    message: `the result of job ${jobId} is ${size} bytes, more than the broker's limit of ${limit} bytes`,
    details: '',
  };
}

/**
 * @typedef {(ctx: JobContext) => unknown | Promise<unknown>} Handler
 * @typedef {{debug: (...a: any[]) => void, info: (...a: any[]) => void, warn: (...a: any[]) => void, error: (...a: any[]) => void}} Logger
 */

/**
 * Channel credentials for TLS, or undefined when tls is not given. Strings are PEM file paths;
 * Buffers are PEM contents.
 * @param {{ca?: string | Buffer, cert?: string | Buffer, key?: string | Buffer, serverName?: string} | undefined} tls
 * @returns {grpc.ChannelCredentials | undefined}
 */
function tlsCredentials(tls) {
  if (!tls) return undefined;
  if (typeof tls !== 'object') throw new TypeError('tls must be an object: {ca, cert, key, serverName}');
  if (!tls.cert !== !tls.key) throw new TypeError('tls.cert and tls.key go together: give both or neither');
  const read = (v) => (v === undefined || v === null ? null : Buffer.isBuffer(v) ? v : fs.readFileSync(v));
  return grpc.credentials.createSsl(read(tls.ca), read(tls.key), read(tls.cert));
}

/**
 * A logger that writes to stderr, which is where worker processes are expected to log. It drops
 * debug, where a job's start and stored result go: a line per job would cost more than a short
 * job itself.
 */
const stderrLogger = {
  debug() {},
  info: (...a) => console.error(new Date().toISOString(), 'INFO jobwire:', ...a),
  warn: (...a) => console.error(new Date().toISOString(), 'WARN jobwire:', ...a),
  error: (...a) => console.error(new Date().toISOString(), 'ERROR jobwire:', ...a),
};

/**
 * Runs handlers for jobs pushed by a Jobwire broker.
 *
 * ```js
 * const worker = new Worker({ address: '127.0.0.1:7070', capacity: 4 });
 * worker.handle('email.send', async (ctx) => { const data = ctx.json(); ... });
 * worker.installSignalHandlers(); // SIGTERM/SIGINT start a graceful shutdown
 * await worker.run();             // resolves once drained
 * ```
 *
 * A handler resolves on success and throws on failure; see errors.js for how errors map to
 * FATAL and TRANSIENT failures.
 */
class Worker {
  /**
   * @param {object} [opts]
   * @param {string} [opts.address] broker host:port
   * @param {string} [opts.workerId] stable id for attempt history (default host-pid)
   * @param {number} [opts.capacity] jobs held at once, 1..10000
   * @param {string[]} [opts.queues] queues to take from; empty means every queue
   * @param {number} [opts.gracePeriodMs] after shutdown(), how long running jobs may take before they are cancelled
   * @param {number} [opts.finishTimeoutMs] after the grace period, how long to wait for their results to be stored
   * @param {number} [opts.connectTimeoutMs] how long to wait for Welcome
   * @param {number} [opts.resendDelayMs] base wait before re-sending a message refused as UNAVAILABLE
   * @param {Backoff} [opts.backoff] reconnect backoff
   * @param {grpc.ChannelCredentials} [opts.credentials] default: insecure, or TLS from opts.tls
   * @param {string} [opts.token] API token for a broker with auth on, sent as "authorization: Bearer <token>"
   * @param {{ca?: string | Buffer, cert?: string | Buffer, key?: string | Buffer, serverName?: string}} [opts.tls] connect over TLS:
   *   ca is the PEM CA certificates to trust (default: the system's), cert and key a client certificate
   *   for a broker that requires one; strings are file paths, read at construction. serverName is
   *   the name to check the broker's certificate against, when the address is not one it holds
   * @param {Logger} [opts.logger] default: stderr
   * @param {() => number} [opts.random] jitter source in [0, 1)
   * @param {boolean} [opts.movable] the address reaches several brokers of one database (a load
   *   balancer, or a DNS name of several), so a new stream may land on another broker: brokers then
   *   even out their workers by ending a movable worker's stream (UNAVAILABLE), and it reconnects
   */
  constructor(opts = {}) {
    this.address = opts.address ?? '127.0.0.1:7070';
    this.workerId = opts.workerId || `${os.hostname()}-${process.pid}`;
    if (this.workerId.length < 1 || this.workerId.length > 255) throw new RangeError('workerId must be 1..255 characters');
    this.capacity = opts.capacity ?? 8;
    if (!Number.isInteger(this.capacity) || this.capacity < 1 || this.capacity > 10000) {
      throw new RangeError('capacity must be an integer in 1..10000');
    }
    this.queues = [...(opts.queues ?? [])];
    this.movable = opts.movable ?? false;
    this.gracePeriodMs = opts.gracePeriodMs ?? 30000;
    this.finishTimeoutMs = opts.finishTimeoutMs ?? 10000;
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10000;
    this.resendDelayMs = opts.resendDelayMs ?? 500;
    this.backoff = opts.backoff ?? new Backoff();
    this.credentials = opts.credentials ?? tlsCredentials(opts.tls) ?? grpc.credentials.createInsecure();
    /**
     * Channel options: a fixed flow-control window (STREAM_WINDOW_BYTES); no retry buffer, and
     * the name the broker's certificate is checked against, if given.
     *
     * grpc-js keeps every message of a call in a buffer, to replay them should it retry the call,
     * and hands it to HTTP/2 only once the one before it is written; each write then copies the
     * rest of that buffer (RetryingCall.clearSentMessages), so a burst of a few hundred Started
     * and Results cost a copy per message of what waits behind it. With no room for that buffer
     * a call is committed at its first message and its messages wait in the stream's own queue.
     * The worker never needs the replay: a stream that fails is reconnected by run(), which
     * sends what the broker has not acknowledged again.
     */
    this.channelOptions = {
      'grpc-node.flow_control_window': STREAM_WINDOW_BYTES,
      'grpc.per_rpc_retry_buffer_size': 0,
      'grpc.max_receive_message_length': MAX_RECEIVE_BYTES,
    };
    if (opts.tls?.serverName) this.channelOptions['grpc.ssl_target_name_override'] = opts.tls.serverName;
    // Whether the channel is TLS (null: credentials of the caller's) and presents a client
    // certificate, to word a failed connection (connect.js).
    this.usesTls = opts.credentials ? null : Boolean(opts.tls);
    this.clientCert = Boolean(opts.tls?.cert);
    /** The current stream got its Welcome. */
    this.welcomed = false;
    if (opts.token !== undefined && (typeof opts.token !== 'string' || opts.token === '' || /\s/.test(opts.token))) {
      throw new TypeError('token must be a non-empty string without white space');
    }
    this.metadata = new grpc.Metadata();
    if (opts.token) this.metadata.set('authorization', `Bearer ${opts.token}`);
    this.log = opts.logger ?? stderrLogger;
    this.random = opts.random ?? Math.random;

    /** @type {Map<string, Handler>} */
    this.handlers = new Map();
    /** Held jobs by id: each counts against capacity until acknowledged, refused or cancelled. */
    this.jobs = new Map();
    /** Releases that may have to be re-sent, by job id. */
    this.releases = new Map();
    this.session = null;
    this.shuttingDown = false;
    this.hardStopped = false;
    /** @type {Set<NodeJS.Timeout>} */
    this.timers = new Set();
    this.wakeUp = null;
    this.running = false;
    /**
     * How long a lease lasts on this worker's clock: the Welcome's lease duration less
     * leaseMarginMs(). Zero (no lease duration announced) leaves leases to the broker.
     */
    this.leaseAllowanceMs = 0;
    /** Jobs assigned by the frame being read, with their handlers: see startHandlers(). */
    this.starting = [];
    /** The largest result the broker stores (Welcome.max_result_bytes); 0: it did not say. */
    this.maxResultBytes = 0;
    /** The least time between two progress reports of a job, and the clock they are timed by. */
    this.progressIntervalMs = PROGRESS_INTERVAL_MS;
    this.clock = () => performance.now();
  }

  /**
   * A worker for the broker the environment names: JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS,
   * JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY and JOBWIRE_TLS_SERVER_NAME
   * (docs/security.md). opts are the other options, and win.
   * @param {ConstructorParameters<typeof Worker>[0]} [opts]
   * @param {Record<string, string | undefined>} [env] default process.env
   */
  static fromEnv(opts = {}, env = process.env) {
    return new Worker({ ...settingsFromEnv(env), ...opts });
  }

  /**
   * Register the handler of a job type.
   * @param {string} jobType
   * @param {Handler} fn
   * @returns {this}
   */
  handle(jobType, fn) {
    if (!jobType) throw new TypeError('jobType must not be empty');
    if (typeof fn !== 'function') throw new TypeError('handler must be a function');
    if (this.handlers.has(jobType)) throw new Error(`a handler for ${jobType} is already registered`);
    this.handlers.set(jobType, fn);
    return this;
  }

  /** Start a graceful shutdown on SIGTERM and SIGINT. Returns a function that removes the hooks. */
  installSignalHandlers() {
    const onSignal = (sig) => this.shutdown(sig);
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    return () => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    };
  }

  /**
   * Connect, take work and reconnect on errors, until a graceful shutdown completes.
   * Rejects when the broker rejects the worker for a reason no reconnect can fix
   * (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED), and with a
   * ConnectError (code, problem, fix) when the token is refused or the TLS settings do not match
   * the broker's: a failed handshake, TLS on one side only, or a missing client certificate. A
   * broker that is down or restarting is waited for.
   */
  async run() {
    if (this.handlers.size === 0) throw new Error('register at least one handler before run()');
    if (this.running) throw new Error('run() is already running');
    this.running = true;
    const client = new grpc.Client(this.address, this.credentials, this.channelOptions);
    try {
      while (!this.done()) {
        try {
          await this.runSession(client);
          this.log.info(`stream to ${this.address} closed`);
        } catch (err) {
          const e = /** @type {any} */ (err);
          if (!this.welcomed) {
            const ce = await classifyConnectError(e, this.address, this.usesTls, this.clientCert);
            if (ce) {
              this.log.error(`cannot connect to the broker at ${this.address}: ${ce.message}`);
              throw ce;
            }
          }
          if (PERMANENT_CODES.has(e.code)) {
            this.log.error(`broker rejected worker: ${e.message}`);
            throw err;
          }
          this.log.warn(`stream failed: ${e.message}`);
        }
        if (this.done()) break;
        const delay = this.backoff.next();
        this.log.info(`reconnecting in ${Math.round(delay)}ms`);
        await new Promise((resolve) => {
          const t = setTimeout(() => {
            this.timers.delete(t);
            this.wakeUp = null;
            resolve();
          }, delay);
          this.timers.add(t);
          this.wakeUp = () => {
            clearTimeout(t);
            this.timers.delete(t);
            this.wakeUp = null;
            resolve();
          };
        });
      }
    } finally {
      this.hardStopped = true;
      for (const t of this.timers) clearTimeout(t);
      this.timers.clear();
      for (const j of this.jobs.values()) {
        this.stopLease(j);
        j.ctx._cancel(CancelReason.SHUTDOWN);
      }
      client.close();
      this.running = false;
    }
  }

  /** Start a graceful shutdown: send Drain, let running jobs finish within the grace period. */
  shutdown(why = 'shutdown()') {
    if (this.shuttingDown) return;
    this.shuttingDown = true;
    this.log.info(`shutting down (${why}): draining, ${this.jobs.size} job(s) running, grace ${this.gracePeriodMs}ms`);
    this.send({ drain: {} });
    this.after(this.gracePeriodMs, () => this.graceOver());
    this.after(this.gracePeriodMs + this.finishTimeoutMs, () => this.hardStop());
    this.afterFree();
  }

  /** Whether run() may return: shutting down with nothing left to report, or out of time. */
  done() {
    return this.hardStopped || (this.shuttingDown && this.jobs.size === 0);
  }

  // ---- one stream ---------------------------------------------------------------------

  /** @param {grpc.Client} client */
  runSession(client) {
    return new Promise((resolve, reject) => {
      this.welcomed = false;
      const codec = workerStream();
      const call = client.makeBidiStreamRequest(codec.path, codec.serialize, codec.deserialize, this.metadata);
      // out: messages to write at the end of this event-loop turn, as one batch frame.
      const sess = { call, heartbeatMs: 10000, drainRequested: false, closing: false, welcomed: false, out: [], flushQueued: false };
      let heartbeat = null;
      let settled = false;
      const finish = (err) => {
        if (settled) return;
        settled = true;
        clearTimeout(helloTimer);
        if (heartbeat) clearInterval(heartbeat);
        if (this.session === sess) this.session = null;
        // Never-started jobs go back to PENDING when the stream ends; every held job here has
        // started, so only pending releases are forgotten.
        this.releases.clear();
        sess.out = [];
        call.cancel();
        if (err) reject(err);
        else resolve();
      };
      const helloTimer = setTimeout(() => finish(new Error('no Welcome within the connect timeout')), this.connectTimeoutMs);

      const onResponse = (resp) => {
        if (!sess.welcomed) {
          if (resp.message !== 'welcome') {
            finish(new Error(`expected Welcome, got ${resp.message}`));
            return;
          }
          sess.welcomed = true;
          this.welcomed = true;
          clearTimeout(helloTimer);
          this.onWelcome(sess, resp.welcome);
          this.backoff.reset();
          this.session = sess;
          heartbeat = setInterval(() => this.heartbeat(), sess.heartbeatMs);
          if (this.shuttingDown) this.send({ drain: {} });
          // Started again for a job still running: the old stream may have ended before the
          // broker read it, and then the adopted lease is not started there. A broker that has
          // it already ignores it.
          for (const j of this.jobs.values()) this.send(j.result ? { result: j.result } : { started: j.ref });
          this.maybeClose();
          return;
        }
        this.onMessage(sess, resp);
      };
      call.on('data', (resp) => {
        if (settled) return;
        if (resp.message === 'batch') {
          // Handled in order, as if they had come one by one.
          for (const m of resp.batch.messages) {
            onResponse(m);
            if (settled) break;
          }
        } else {
          onResponse(resp);
        }
        this.startHandlers(sess);
      });
      call.on('error', (err) => finish(err));
      call.on('status', (st) => {
        if (st.code === grpc.status.OK) finish();
        else finish(Object.assign(new Error(`${st.code} ${st.details}`), { code: st.code }));
      });
      call.on('end', () => {
        // The broker closed its side; 'status' follows and settles the session.
      });

      call.write({
        hello: {
          workerId: this.workerId,
          jobTypes: [...this.handlers.keys()].sort(),
          queues: this.queues,
          capacity: this.capacity,
          held: [...this.jobs.values()].map((j) => j.ref),
          movable: this.movable,
          acceptsBatches: true,
        },
      });
    });
  }

  onWelcome(sess, w) {
    const leaseMs = durationToMs(w.leaseDuration);
    let hb = durationToMs(w.heartbeatInterval);
    if (!(hb > 0)) hb = leaseMs > 0 ? leaseMs / 3 : 10000;
    sess.heartbeatMs = hb;
    this.maxResultBytes = w.maxResultBytes || 0;
    this.leaseAllowanceMs = leaseMs > 0 ? leaseMs - leaseMarginMs(leaseMs, hb) : 0;
    // Heartbeats of the old stream are never answered; adopted leases keep their deadlines.
    for (const j of this.jobs.values()) j.heartbeatAt = undefined;
    this.log.info(
      `connected to ${this.address} as ${this.workerId} (session ${w.sessionId}, lease ${leaseMs}ms, heartbeat ${hb}ms, holding ${this.jobs.size})`,
    );
    for (const ref of w.lost) {
      const j = this.jobs.get(ref.jobId);
      if (j && j.ctx.leaseToken === ref.leaseToken) {
        this.log.warn(`lease of job ${ref.jobId} lost while disconnected`);
        this.drop(j, CancelReason.LEASE_LOST);
      }
    }
  }

  heartbeat() {
    // Every held lease, including ones whose result is not yet stored: the lease must outlive a
    // broker that is slow to store the result.
    const leases = [...this.jobs.values()].map((j) => j.ref);
    if (leases.length === 0) return;
    const now = performance.now();
    for (const j of this.jobs.values()) j.heartbeatAt ??= now;
    this.send({ heartbeat: { leases } });
  }

  /**
   * Write msg on the current stream; without one, it is dropped (results are re-sent).
   *
   * Messages are written at the end of the event-loop turn that made them ready (or earlier, see
   * flush()), those of one turn together as one batch frame: a gRPC message costs grpc-js and
   * HTTP/2 about as much as a small job does. None waits longer than its own turn for company.
   * Drain travels alone, after what is queued before it.
   */
  send(msg) {
    const sess = this.session;
    if (!sess || sess.closing) return;
    if (msg.drain) {
      this.flush(sess);
      sess.call.write(msg);
      return;
    }
    sess.out.push(msg);
    if (!sess.flushQueued) {
      sess.flushQueued = true;
      setImmediate(() => this.flush(sess));
    }
  }

  /**
   * Write what sess has queued: a lone message as it is, more as batches of up to MAX_BATCH
   * messages and MAX_BATCH_BYTES.
   */
  flush(sess) {
    sess.flushQueued = false;
    const out = sess.out;
    if (out.length === 0) return;
    sess.out = [];
    if (sess.closing || this.session !== sess) return;
    let messages = [];
    let bytes = 0;
    const write = () => {
      if (messages.length > 0) sess.call.write(messages.length === 1 ? messages[0] : { batch: { messages } });
      messages = [];
      bytes = 0;
    };
    for (const m of out) {
      const n = sizeBound(m);
      if (messages.length === MAX_BATCH || (messages.length > 0 && bytes + n > MAX_BATCH_BYTES)) write();
      messages.push(m);
      bytes += n;
    }
    write();
  }

  /**
   * Run the handlers of the jobs assigned by the frame just read, once their Started are
   * written: Started reaches the broker before user code runs, and those of one frame go as one
   * batch. A job the same frame cancelled again never runs.
   */
  startHandlers(sess) {
    const starting = this.starting;
    if (starting.length === 0) return;
    this.starting = [];
    this.flush(sess);
    for (const [j, fn] of starting) {
      if (this.jobs.get(j.ref.jobId) === j) this.execute(j, fn);
      else j.clearTimeout?.();
    }
  }

  /** Half-close the stream once draining and nothing is held any more. */
  maybeClose() {
    const sess = this.session;
    if (!sess || sess.closing) return;
    if ((this.shuttingDown || sess.drainRequested) && this.jobs.size === 0) {
      this.flush(sess); // releases, say
      sess.closing = true;
      sess.call.end();
      // If the broker does not close its side in time, give up on the stream.
      this.after(this.finishTimeoutMs, () => sess.call.cancel());
    }
  }

  // ---- broker messages ----------------------------------------------------------------

  onMessage(sess, resp) {
    switch (resp.message) {
      case 'assignment':
        this.onAssignment(resp.assignment);
        break;
      case 'resultAck': {
        const ack = resp.resultAck;
        const j = this.jobs.get(ack.jobId);
        if (j && j.ctx.leaseToken === ack.leaseToken) {
          this.jobs.delete(ack.jobId);
          this.log.debug(`job ${ack.jobId} result stored: ${ack.decision}`);
          this.afterFree();
        }
        break;
      }
      case 'refused':
        this.onRefused(resp.refused);
        break;
      case 'cancel': {
        const c = resp.cancel;
        const j = this.jobs.get(c.jobId);
        if (j && j.ctx.leaseToken === c.leaseToken) {
          const reason = WIRE_CANCEL_REASONS[c.reason] ?? CancelReason.REQUESTED;
          this.log.info(`job ${c.jobId} cancelled by broker (${reason})`);
          this.drop(j, reason);
        }
        break;
      }
      case 'drain':
        this.log.info(`broker asked to drain: ${resp.drain.reason}`);
        sess.drainRequested = true;
        this.maybeClose();
        break;
      case 'heartbeatAck':
        this.onExtended(resp.heartbeatAck.extended);
        break;
      default:
        this.log.warn(`unexpected message ${resp.message}`);
    }
  }

  onAssignment(a) {
    const jobId = int64String(a.job.id);
    const old = this.jobs.get(jobId);
    if (old) {
      if (old.ctx.leaseToken === a.leaseToken) return; // a duplicate of what we run
      // A newer lease on the same job: ours is stale, so its outcome must not be reported.
      this.drop(old, CancelReason.LEASE_LOST);
    }
    const draining = this.shuttingDown || (this.session && this.session.drainRequested);
    const fn = this.handlers.get(a.job.type);
    let reason = '';
    if (draining) reason = 'worker is draining';
    else if (!fn) reason = `no handler for job type ${a.job.type}`;
    else if (this.jobs.size >= this.capacity) reason = 'worker is at capacity';
    if (reason) {
      this.release({ jobId, leaseToken: a.leaseToken, reason });
      return;
    }
    const ctx = new JobContext(a);
    const j = {
      ctx,
      result: null,
      shutdownCancelled: false,
      timedOut: false,
      ref: { jobId, leaseToken: a.leaseToken },
      // The lease as this worker counts it: leaseTimer gives the job up at leaseEnd unless an
      // extension moves it first; heartbeatAt is when the oldest heartbeat that named the lease
      // on this stream and has no answer yet was sent.
      leaseEnd: undefined,
      leaseTimer: undefined,
      heartbeatAt: undefined,
      progress: new ProgressThrottle(this.progressIntervalMs),
      progressTimer: undefined,
    };
    ctx._progressSink = (fraction, message) => this.offerProgress(j, fraction, message);
    this.jobs.set(jobId, j);
    this.armLease(j, performance.now());
    // Started must reach the broker before user code runs: the attempt counts from here.
    this.send({ started: j.ref });
    this.log.debug(`job ${jobId} (${a.job.type}) attempt ${a.attempt} started`);
    if (ctx.attemptTimeoutMs) {
      // The handler is told to stop once its attempt timeout has passed; it reports that as the
      // timeout it is (Failure.timed_out), not as an ordinary transient failure.
      const timer = setTimeout(() => {
        if (this.jobs.get(jobId) !== j || j.result) return;
        this.log.warn(`job ${jobId} outlived its attempt timeout of ${ctx.attemptTimeoutMs}ms: cancelling it`);
        j.timedOut = true;
        ctx._cancel(CancelReason.TIMEOUT);
      }, ctx.attemptTimeoutMs);
      timer.unref?.();
      j.clearTimeout = () => clearTimeout(timer);
    }
    this.starting.push([j, fn]);
  }

  onRefused(r) {
    if (r.refusedMessage === 'REFUSED_MESSAGE_RELEASE') {
      const rel = this.releases.get(r.jobId);
      if (rel && rel.leaseToken === r.leaseToken) {
        if (r.code === CODE_UNAVAILABLE) this.later(() => this.releases.get(r.jobId) === rel && this.send({ release: rel }));
        else this.releases.delete(r.jobId);
      }
      return;
    }
    const j = this.jobs.get(r.jobId);
    if (!j || j.ctx.leaseToken !== r.leaseToken) return;
    const held = () => this.jobs.get(r.jobId) === j;
    if (r.code === CODE_UNAVAILABLE) {
      if (r.refusedMessage === 'REFUSED_MESSAGE_RESULT') {
        this.later(() => held() && this.send({ result: j.result }));
      } else if (r.refusedMessage === 'REFUSED_MESSAGE_STARTED') {
        this.later(() => held() && this.send({ started: j.ref }));
      }
      return; // a refused heartbeat is repeated by the next tick anyway
    }
    if (r.refusedMessage === 'REFUSED_MESSAGE_PROGRESS' && r.code === CODE_INVALID_ARGUMENT) {
      this.log.warn(`broker refused a progress report of job ${r.jobId}: ${r.message}`);
      return; // progress is advisory: the job goes on
    }
    const settling = r.refusedMessage === 'REFUSED_MESSAGE_HEARTBEAT' || r.refusedMessage === 'REFUSED_MESSAGE_PROGRESS';
    if (settling && j.result) return; // the Result's own answer settles it
    this.log.warn(`broker refused ${r.refusedMessage} for job ${r.jobId} (code ${r.code}: ${r.message}); dropping the job`);
    this.drop(j, CancelReason.LEASE_LOST);
  }

  // ---- the lease as this worker counts it (see lease.js) ------------------------------

  /** (Re)start j's lease deadline: start (performance.now() time) plus the lease allowance. */
  armLease(j, start) {
    this.stopLease(j);
    if (!(this.leaseAllowanceMs > 0)) return;
    j.leaseEnd = start + this.leaseAllowanceMs;
    // Whole milliseconds, rounded down: Node keeps one list of timers per delay, and a
    // fractional delay would give every job a list of its own.
    j.leaseTimer = setTimeout(() => this.leaseRanOut(j), Math.max(Math.floor(j.leaseEnd - performance.now()), 1));
    j.leaseTimer.unref?.();
  }

  stopLease(j) {
    if (j.leaseTimer) clearTimeout(j.leaseTimer);
    j.leaseTimer = undefined;
  }

  /**
   * Give up a job whose lease passed on this worker's clock without an extension: the broker
   * (frozen or cut off) may already run its next attempt elsewhere.
   */
  leaseRanOut(j) {
    j.leaseTimer = undefined;
    if (this.jobs.get(j.ref.jobId) !== j || j.result) return;
    this.log.warn(`job ${j.ref.jobId}: lease ran out without an extension from the broker; cancelling it`);
    this.drop(j, CancelReason.LEASE_LOST);
  }

  /** Move the deadline of every lease a HeartbeatAck lists as extended. */
  onExtended(extended) {
    const now = performance.now();
    for (const ref of extended) {
      const j = this.jobs.get(ref.jobId);
      if (!j || j.ctx.leaseToken !== ref.leaseToken) continue;
      const start = j.heartbeatAt === undefined ? now : Math.min(j.heartbeatAt, now);
      j.heartbeatAt = undefined;
      if (!j.result) this.armLease(j, start);
    }
  }

  // ---- helpers ------------------------------------------------------------------------

  /** Forget j: the broker has settled it. Its handler is aborted; its outcome is discarded. */
  drop(j, reason) {
    if (this.jobs.get(j.ref.jobId) === j) this.jobs.delete(j.ref.jobId);
    this.stopLease(j);
    this.stopProgress(j);
    j.ctx._cancel(reason);
    this.afterFree();
  }

  // ---- progress (see progress.js) ----------------------------------------------------

  /** Take a report from the handler: sent now, held back for a flush, or dropped. */
  offerProgress(j, fraction, message) {
    if (this.jobs.get(j.ref.jobId) !== j || j.result) return;
    const { send, dueAt } = j.progress.offer(this.clock(), { ...j.ref, fraction, message });
    if (send) this.send({ progress: send });
    if (dueAt !== undefined) {
      j.progressTimer = setTimeout(() => this.progressDue(j), Math.max(Math.ceil(dueAt - this.clock()), 0));
      j.progressTimer.unref?.();
    }
  }

  /** Send the report j's throttle held back, unless the throttle was closed meanwhile. */
  progressDue(j) {
    j.progressTimer = undefined;
    const p = j.progress.due(this.clock());
    if (p) this.send({ progress: p });
  }

  /**
   * No progress for j from now on: its result goes next, or it is gone. Returns the report held
   * back, which goes right before the result.
   */
  stopProgress(j) {
    if (j.progressTimer) clearTimeout(j.progressTimer);
    j.progressTimer = undefined;
    return j.progress.close();
  }

  afterFree() {
    this.maybeClose();
    if (this.done() && this.wakeUp) this.wakeUp();
  }

  release(rel) {
    this.log.info(`releasing job ${rel.jobId}: ${rel.reason}`);
    this.releases.set(rel.jobId, rel);
    this.send({ release: rel });
  }

  /** Run fn after ms, unless run() ended first. */
  after(ms, fn) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }

  /** Run fn after resendDelayMs with jitter, so a busy broker is not hammered in lockstep. */
  later(fn) {
    this.after(this.resendDelayMs * (1 + this.random()), fn);
  }

  async execute(j, fn) {
    const { ctx } = j;
    const result = { jobId: ctx.id, leaseToken: ctx.leaseToken };
    try {
      const value = await fn(ctx);
      const data = value === undefined ? ctx._result : encodeResult(value);
      const limit = this.maxResultBytes;
      if (data && limit > 0 && data.length > limit) {
        result.failure = resultTooLarge(ctx.id, data.length, limit);
        this.log.info(`job ${ctx.id} failed (FATAL): ${result.failure.message}`);
      } else {
        result.success = data && data.length > 0 ? { result: data } : {};
      }
    } catch (err) {
      if (j.timedOut) {
        // The attempt timeout stopped it: a timeout, whatever the handler made of that.
        const c = classify(err);
        result.failure = {
          kind: FAILURE_KIND_TRANSIENT,
          errorType: c.errorType,
          message: c.message || `attempt timeout of ${ctx.attemptTimeoutMs}ms exceeded`,
          details: c.details,
          timedOut: true,
        };
      } else if (j.shutdownCancelled && (err === ctx.signal.reason || /** @type {any} */ (err)?.name === 'AbortError')) {
        result.failure = {
          kind: FAILURE_KIND_TRANSIENT,
          errorType: 'WorkerShutdown',
          message: 'the worker shut down before the job finished',
          details: '',
        };
      } else {
        const c = classify(err);
        result.failure = toFailure(c);
        this.log.info(`job ${ctx.id} failed (${c.kind}): ${c.errorType}: ${c.message}`);
      }
    }
    j.clearTimeout?.();
    this.stopLease(j); // the result is sent whatever becomes of the lease now
    const last = this.stopProgress(j); // nothing after the result; what was held back goes before it
    if (this.jobs.get(ctx.id) !== j) return; // cancelled or lost meanwhile: results would be refused
    if (last) this.send({ progress: last });
    j.result = result;
    this.send({ result });
  }

  graceOver() {
    for (const j of this.jobs.values()) {
      if (!j.result) {
        this.log.warn(`grace period over: cancelling job ${j.ctx.id}`);
        j.shutdownCancelled = true;
        j.ctx._cancel(CancelReason.SHUTDOWN);
      }
    }
  }

  hardStop() {
    if (this.jobs.size > 0) this.log.error(`giving up on ${this.jobs.size} unreported job(s)`);
    this.hardStopped = true;
    if (this.wakeUp) this.wakeUp();
    if (this.session) this.session.call.cancel();
  }
}

module.exports = { Worker, JobContext, JobCancelledError, CancelReason, CODE_FAILED_PRECONDITION, CODE_UNAVAILABLE };
