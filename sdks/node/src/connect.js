'use strict';

/**
 * Connection settings from the environment, and the connection failures no reconnect can fix.
 * The variables are the ones the jobwire command and the Go and Python libraries read
 * (docs/security.md, "Connecting from the environment").
 */

const net = require('node:net');
const tls = require('node:tls');
const grpc = require('@grpc/grpc-js');

const ENV = Object.freeze({
  ADDR: 'JOBWIRE_ADDR',
  TOKEN: 'JOBWIRE_TOKEN',
  TLS: 'JOBWIRE_TLS',
  TLS_CA: 'JOBWIRE_TLS_CA',
  TLS_CERT: 'JOBWIRE_TLS_CERT',
  TLS_KEY: 'JOBWIRE_TLS_KEY',
  TLS_SERVER_NAME: 'JOBWIRE_TLS_SERVER_NAME',
});

const DEFAULT_ADDRESS = '127.0.0.1:7070';

/** How long the TLS probe of a broker that closed a connection may take. */
const PROBE_TIMEOUT_MS = 5000;

/**
 * The Worker options the environment gives: address, token and tls. Unset variables are left
 * out, so the Worker's defaults apply.
 * @param {Record<string, string | undefined>} [env] default process.env
 */
function settingsFromEnv(env = process.env) {
  /** @type {{address: string, token?: string, tls?: {ca?: string, cert?: string, key?: string, serverName?: string}}} */
  const out = { address: env[ENV.ADDR] || DEFAULT_ADDRESS };
  if (env[ENV.TOKEN]) out.token = env[ENV.TOKEN];
  const t = {};
  if (env[ENV.TLS_CA]) t.ca = env[ENV.TLS_CA];
  if (env[ENV.TLS_CERT]) t.cert = env[ENV.TLS_CERT];
  if (env[ENV.TLS_KEY]) t.key = env[ENV.TLS_KEY];
  if (env[ENV.TLS_SERVER_NAME]) t.serverName = env[ENV.TLS_SERVER_NAME];
  if (env[ENV.TLS] === 'true' || Object.keys(t).length > 0) out.tls = t;
  return out;
}

/**
 * The worker cannot connect in a way that reconnecting would fix: a failed TLS handshake (kind
 * 'tls') or a token the broker refused (kind 'auth'). It keeps the stream error's gRPC code;
 * problem says what happened and fix what to change. run() rejects with it.
 */
class ConnectError extends Error {
  /**
   * @param {'tls' | 'auth'} kind
   * @param {string} problem
   * @param {string} fix
   * @param {any} cause the stream's error
   */
  constructor(kind, problem, fix, cause) {
    super(`jobwire: ${problem}; ${fix}`, { cause });
    this.name = 'ConnectError';
    this.kind = kind;
    this.problem = problem;
    this.fix = fix;
    this.code = cause?.code;
    this.details = `${problem}; ${fix}`;
  }
}

const tlsError = (problem, fix, err) => new ConnectError('tls', problem, fix, err);

function clientCertError(err, clientCert) {
  if (!clientCert) {
    return tlsError(
      'the broker requires a client certificate (mutual TLS) and none was given',
      `set ${ENV.TLS_CERT} and ${ENV.TLS_KEY} (tls: {cert, key}) to a certificate signed by the CA the broker trusts`,
      err,
    );
  }
  return tlsError(
    `the broker refused this worker's client certificate (${err.details})`,
    'use a client certificate signed by the CA the broker trusts (its --tls-client-ca), and not expired',
    err,
  );
}

/**
 * err as a ConnectError when no reconnect can fix it, else null (the broker is down or
 * restarting, or the connection dropped). useTls says whether the worker's channel is TLS
 * (null: unknown, credentials of the caller's); clientCert whether it presents a client
 * certificate. When the broker closed the connection without a word, a TLS probe of address
 * tells a TLS broker from one that is not there.
 * @returns {Promise<ConnectError | null>}
 */
async function classifyConnectError(err, address, useTls, clientCert) {
  const code = err?.code;
  const msg = String(err?.details ?? err?.message ?? '');
  if (code === grpc.status.UNAUTHENTICATED) {
    return new ConnectError(
      'auth',
      `the broker refused the token: ${msg}`,
      `set ${ENV.TOKEN} (token) to a token the broker issued (jobwire tokens create)`,
      err,
    );
  }
  if (code === grpc.status.PERMISSION_DENIED) {
    return new ConnectError(
      'auth',
      `the token is not allowed this: ${msg}`,
      'use a token whose role and scope cover it (jobwire tokens create --role worker --types ...)',
      err,
    );
  }
  if (code !== grpc.status.UNAVAILABLE) return null;
  const low = msg.toLowerCase();
  if (low.includes('wrong version number') || low.includes('packet length too long')) {
    return tlsError(
      'this worker connected with TLS but the broker does not serve TLS',
      `start the broker with --tls-cert and --tls-key, or connect without TLS (unset ${ENV.TLS}, ${ENV.TLS_CA}, ${ENV.TLS_CERT} and ${ENV.TLS_KEY})`,
      err,
    );
  }
  if (
    low.includes('unable to verify the first certificate') ||
    low.includes('unable to get local issuer certificate') ||
    low.includes('self-signed certificate') ||
    low.includes('self signed certificate')
  ) {
    return tlsError(
      `the broker's certificate is not signed by a CA this worker trusts (${msg})`,
      `set ${ENV.TLS_CA} (tls: {ca}) to the CA certificate that signed the broker's certificate`,
      err,
    );
  }
  if (low.includes("hostname/ip does not match certificate's altnames")) {
    return tlsError(
      `the broker's certificate does not name the address dialled (${msg})`,
      `connect by a name the certificate holds, or set ${ENV.TLS_SERVER_NAME} (tls: {serverName}) to one`,
      err,
    );
  }
  if (low.includes('certificate required') || low.includes('alert bad certificate') || low.includes('alert unknown ca')) {
    return clientCertError(err, clientCert);
  }
  if (low.includes('econnrefused') || low.includes('enotfound') || low.includes('name resolution failed')) {
    return null; // nothing listens there (yet): a broker that is starting
  }
  // The broker closed the connection without a word: a TLS broker does that to a plaintext
  // client, and, after the handshake, to a client without the certificate it requires.
  if (useTls === null || useTls === undefined) return null;
  const probe = await probeTls(address, { verdict: useTls && !clientCert });
  if (!useTls && probe !== null) {
    return tlsError(
      'the broker serves TLS and this worker connected without it',
      `set ${ENV.TLS_CA} (tls: {ca}) to the CA of the broker's certificate, or ${ENV.TLS}=true (tls: {}) if the system trusts it`,
      err,
    );
  }
  if (useTls && !clientCert && probe === 'certificate required') return clientCertError(err, clientCert);
  return null;
}

/**
 * Whether address answers a TLS handshake made without a client certificate: 'tls', or null
 * when it does not speak TLS or cannot be reached. With verdict, it also waits for the server's
 * first bytes and answers 'certificate required' when the server refuses the connection instead
 * (with TLS 1.3 a refused client certificate arrives after the handshake). Nothing is sent once
 * the handshake is done.
 * @param {string} address host:port
 * @returns {Promise<'tls' | 'certificate required' | null>}
 */
function probeTls(address, { verdict = false, timeoutMs = PROBE_TIMEOUT_MS } = {}) {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(address.slice(i + 1));
  return new Promise((resolve) => {
    let handshaken = false;
    let settled = false;
    const done = (v) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(v);
    };
    const opts = { host, port, rejectUnauthorized: false, ALPNProtocols: ['h2'] };
    if (!net.isIP(host)) opts.servername = host;
    const sock = tls.connect(opts, () => {
      handshaken = true;
      if (!verdict) done('tls');
    });
    const timer = setTimeout(() => done(handshaken ? 'tls' : null), timeoutMs);
    sock.on('data', () => done('tls'));
    sock.on('error', (e) => {
      const m = String(e.message).toLowerCase();
      if (handshaken || m.includes('certificate required') || m.includes('handshake failure')) done('certificate required');
      else done(null);
    });
    sock.on('end', () => done(handshaken ? 'certificate required' : null));
    sock.on('close', () => done(handshaken ? 'certificate required' : null));
  });
}

module.exports = { ENV, DEFAULT_ADDRESS, ConnectError, settingsFromEnv, classifyConnectError, probeTls };
