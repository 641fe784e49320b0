// Type declarations of @jobwire/worker, written by hand next to src/; the package's tests compile
// a program against them (test/types.test.js), so a missing export or a wrong shape fails there.

import type { ChannelCredentials } from '@grpc/grpc-js';

/** Why a job was cancelled, as found in `ctx.cancelReason` and `ctx.signal.reason.reason`. */
export declare const CancelReason: Readonly<{
  /** Someone called CancelJob. */
  REQUESTED: 'requested';
  /** The attempt outlived its attempt timeout. */
  TIMEOUT: 'timeout';
  /** The broker no longer considers this worker the lease holder, or the lease ran out on the worker's clock. */
  LEASE_LOST: 'lease_lost';
  /** This worker is shutting down and its grace period ran out. */
  SHUTDOWN: 'shutdown';
}>;
export type CancelReasonValue = (typeof CancelReason)[keyof typeof CancelReason];

/** The reason an aborted `JobContext.signal` carries. */
export declare class JobCancelledError extends Error {
  constructor(reason: CancelReasonValue);
  readonly reason: CancelReasonValue;
}

/** What a handler gets to know about the job it runs. */
export declare class JobContext {
  /** Built by the worker for each attempt. */
  constructor(assignment: any);
  /** The decoded jobwire.v1.Job. */
  readonly job: unknown;
  /** The job id: an int64 as a decimal string. */
  readonly id: string;
  readonly type: string;
  readonly queue: string;
  readonly payload: Buffer;
  /** This attempt's number, from 1. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** The lease of this attempt, as a string. */
  readonly leaseToken: string;
  /** How long this attempt may run, if the job has a limit. */
  readonly attemptTimeoutMs: number | undefined;
  /** What the producer attached: its own keys, and the W3C trace context ("traceparent", "tracestate"). */
  readonly metadata: Record<string, string>;
  /** The producer's W3C traceparent, if the job carries one. */
  readonly traceparent: string | undefined;
  /** Aborted when the job is cancelled; pass it to fetch, timers/promises, child processes. */
  readonly signal: AbortSignal;
  /** Why the job was cancelled, if it was. */
  readonly cancelReason: CancelReasonValue | undefined;
  /** The payload decoded as JSON; a malformed payload throws SyntaxError, which is FATAL. */
  json<T = any>(): T;
  /** The results of the jobs this one depends on, in the order the producer named them. */
  readonly parentResults: ParentResult[];
  /**
   * Set the job's result: a Buffer or Uint8Array as it is, a string as UTF-8, anything else as
   * JSON. A value the handler resolves to (other than undefined) wins. Larger than the broker's
   * limit, the attempt fails as FATAL with error type ResultTooLarge.
   */
  setResult(value: unknown): void;
  /**
   * Report how far the job got: a fraction from 0 to 1 (null when unknown) and/or a short
   * message. Sent at most once a second per job, the last one always, none after the result.
   */
  progress(fraction?: number | null, message?: string): void;
}

/** The result of a job another depends on, as its assignment carries it. */
export interface ParentResult {
  /** The parent's id: an int64 as a decimal string. */
  readonly jobId: string;
  readonly type: string;
  /** What the parent returned; empty if nothing. */
  readonly result: Buffer;
  /** 'succeeded', or 'dead' or 'cancelled' for a job enqueued to run whatever its parents' outcome. */
  readonly state: string;
  /** The result decoded as JSON. */
  json<T = any>(): T;
}

/** A handler resolves for success (its value is the job's result) and throws (or rejects) for failure. */
export type Handler = (ctx: JobContext) => unknown | Promise<unknown>;

export interface Logger {
  debug(...args: any[]): void;
  info(...args: any[]): void;
  warn(...args: any[]): void;
  error(...args: any[]): void;
}

export interface WorkerOptions {
  /** Broker host:port. Default 127.0.0.1:7070. */
  address?: string;
  /** Stable id for attempt history. Default host-pid. */
  workerId?: string;
  /** Jobs held at once, 1..10000. Default 8. */
  capacity?: number;
  /** Queues to take jobs from; empty means every queue. */
  queues?: string[];
  /** After shutdown(), how long running jobs may take before they are cancelled. Default 30000. */
  gracePeriodMs?: number;
  /** After the grace period, how long to wait for their results to be stored. Default 10000. */
  finishTimeoutMs?: number;
  /** How long to wait for the broker's Welcome. Default 10000. */
  connectTimeoutMs?: number;
  /** Base wait before re-sending a message the broker refused as UNAVAILABLE. Default 500. */
  resendDelayMs?: number;
  /** Reconnect backoff. Default `new Backoff({ baseMs: 200, capMs: 30000 })`. */
  backoff?: Backoff;
  /** Channel credentials, e.g. `grpc.credentials.createSsl(...)`; win over `tls`. Default insecure. */
  credentials?: ChannelCredentials;
  /** API token for a broker with auth on, sent as `authorization: Bearer <token>`. */
  token?: string;
  /**
   * Connect over TLS: `ca` is the PEM CA certificates to trust (default: the system's), `cert`
   * and `key` a client certificate for a broker that requires one (mutual TLS). Strings are
   * file paths, read when the Worker is made; Buffers are PEM contents. `serverName` is the name
   * to check the broker's certificate against, when the address is not one it holds.
   */
  tls?: { ca?: string | Buffer; cert?: string | Buffer; key?: string | Buffer; serverName?: string };
  /** Where the worker logs. Default stderr. */
  logger?: Logger;
  /** Jitter source in [0, 1). Default Math.random. */
  random?: () => number;
  /**
   * The address reaches several brokers of one database (a load balancer, or a DNS name of
   * several), so a new stream may land on another broker: brokers then even out their workers
   * by ending a movable worker's stream (UNAVAILABLE), and it reconnects. Default false.
   */
  movable?: boolean;
}

/** Runs handlers for jobs pushed by a Jobwire broker over one gRPC stream. */
export declare class Worker {
  constructor(opts?: WorkerOptions);
  /**
   * A worker for the broker the environment names (JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS,
   * JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY, JOBWIRE_TLS_SERVER_NAME); `opts` win.
   */
  static fromEnv(opts?: WorkerOptions, env?: Record<string, string | undefined>): Worker;
  readonly address: string;
  readonly workerId: string;
  readonly capacity: number;
  /** Register the handler of a job type; returns the worker for chaining. */
  handle(jobType: string, fn: Handler): this;
  /** Start a graceful shutdown on SIGTERM and SIGINT; returns a function that removes the hooks. */
  installSignalHandlers(): () => void;
  /**
   * Connect and take work until a graceful shutdown completes; rejects on a configuration error,
   * with a ConnectError when the token or the TLS settings do not match the broker's.
   */
  run(): Promise<void>;
  /** Start a graceful shutdown: send Drain, let running jobs finish within the grace period. */
  shutdown(why?: string): void;
}

/** The Worker options the environment gives: address, token and tls. */
export declare function settingsFromEnv(env?: Record<string, string | undefined>): Pick<WorkerOptions, 'address' | 'token' | 'tls'> & { address: string };

/**
 * The worker cannot connect in a way that reconnecting would fix: a failed TLS handshake
 * (`kind` 'tls') or a token the broker refused ('auth'). `code` is the stream's gRPC status code.
 */
export declare class ConnectError extends Error {
  readonly kind: 'tls' | 'auth';
  /** What happened. */
  readonly problem: string;
  /** What to change. */
  readonly fix: string;
  readonly code: number;
  readonly details: string;
}

/** Capped exponential backoff with full jitter. */
export declare class Backoff {
  constructor(opts?: { baseMs?: number; capMs?: number; random?: () => number });
  readonly baseMs: number;
  readonly capMs: number;
  /** The largest delay after this many consecutive failures. */
  ceiling(failures: number): number;
  /** The delay before the next try; counts one more failure. */
  next(): number;
  /** Start over after a success. */
  reset(): void;
}

/** A failure retrying cannot fix: the job goes to the dead-letter queue at once. */
export declare class FatalError extends Error {
  constructor(message: string, options?: { cause?: unknown });
}

/** A transient failure that asks the broker to retry after `ms` milliseconds. */
export declare class RetryAfterError extends Error {
  constructor(ms: number, message?: string, options?: { cause?: unknown });
  readonly retryAfterMs: number;
}

/** Marks any error as transient with a retry delay; `throw retryAfter(err, 30_000)`. */
export declare function retryAfter<E>(err: E, ms: number): E & { retryAfterMs: number };

/** The error type name reported to the broker: `err.name`, else the constructor's name. */
export declare function errorTypeName(err: unknown): string;

export declare const FAILURE_KIND_FATAL: 'FAILURE_KIND_FATAL';
export declare const FAILURE_KIND_TRANSIENT: 'FAILURE_KIND_TRANSIENT';

/** How a thrown value is reported to the broker. */
export interface Classified {
  kind: typeof FAILURE_KIND_FATAL | typeof FAILURE_KIND_TRANSIENT;
  errorType: string;
  message: string;
  /** The stack trace. */
  details: string;
  retryAfterMs: number | undefined;
}

/** Classify a thrown value as the worker does: FATAL or TRANSIENT, with its type and message. */
export declare function classify(err: unknown): Classified;

/** Error classes whose instances (and subclasses') are FATAL. */
export declare const FATAL_ERROR_TYPES: ReadonlyArray<new (...args: any[]) => Error>;

/** The loaded `jobwire.v1` proto package: message types and service constructors. */
export declare function loadJobwire(root?: string): any;
