'use strict';

// Connection settings from the environment, and connection failures no reconnect can fix,
// against a broker that serves TLS on loopback with throwaway certificates made by openssl.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const grpc = require('@grpc/grpc-js');
const { Worker, Backoff, ConnectError, settingsFromEnv, loadJobwire } = require('../src/index');

const WAIT_MS = 5000;
// A worker that reconnects instead of stopping runs until this ends the test.
const BOUND_MS = 20000;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

function haveOpenssl() {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A CA (name.pem, name-key.pem), and certificates it signs, in dir. */
function makeCA(dir, name) {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-subj', `/CN=${name}`, '-keyout', `${dir}/${name}-key.pem`, '-out', `${dir}/${name}.pem`], { stdio: 'ignore' });
}

function issue(dir, ca, name, ext) {
  execFileSync('openssl', ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-subj', `/CN=${name}`, '-keyout', `${dir}/${name}-key.pem`, '-out', `${dir}/${name}.csr`], { stdio: 'ignore' });
  fs.writeFileSync(`${dir}/${name}.ext`, ext);
  execFileSync('openssl', ['x509', '-req', '-in', `${dir}/${name}.csr`, '-CA', `${dir}/${ca}.pem`, '-CAkey', `${dir}/${ca}-key.pem`,
    '-CAcreateserial', '-days', '1', '-extfile', `${dir}/${name}.ext`, '-out', `${dir}/${name}.pem`], { stdio: 'ignore' });
}

const skip = haveOpenssl() ? false : 'openssl makes the test certificates';
let dir;
const file = (name) => path.join(dir, name);

test.before(() => {
  if (skip) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jobwire-connect-'));
  makeCA(dir, 'ca');
  makeCA(dir, 'other');
  issue(dir, 'ca', 'server', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  issue(dir, 'ca', 'client', 'extendedKeyUsage=clientAuth\n');
});

test.after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** A broker on loopback whose streams are handed to onStream, serving TLS when tls is set. */
async function serve(t, { tls = false, mutual = false, onStream = () => {} } = {}) {
  const pkg = loadJobwire();
  const server = new grpc.Server();
  server.addService(pkg.WorkerService.service, { Connect: onStream });
  const creds = tls
    ? grpc.ServerCredentials.createSsl(
        mutual ? fs.readFileSync(file('ca.pem')) : null,
        [{ private_key: fs.readFileSync(file('server-key.pem')), cert_chain: fs.readFileSync(file('server.pem')) }],
        mutual,
      )
    : grpc.ServerCredentials.createInsecure();
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', creds, (err, p) => (err ? reject(err) : resolve(p))),
  );
  t.after(() => server.forceShutdown());
  return `127.0.0.1:${port}`;
}

function worker(opts) {
  const w = new Worker({ workerId: 'w1', capacity: 1, backoff: new Backoff({ baseMs: 10, capMs: 50 }), logger: quiet, ...opts });
  w.handle('echo', async () => {});
  return w;
}

/** run() of w, which must settle within BOUND_MS: a worker that keeps reconnecting fails. */
function runBounded(w) {
  let timer;
  const bound = new Promise((_, reject) => {
    timer = setTimeout(() => {
      w.shutdown('test bound');
      reject(new Error(`run() still reconnecting after ${BOUND_MS}ms`));
    }, BOUND_MS);
  });
  return Promise.race([w.run(), bound]).finally(() => clearTimeout(timer));
}

test('mismatched TLS settings stop run() with the fix', { skip }, async (t) => {
  const mtls = await serve(t, { tls: true, mutual: true });
  const plain = await serve(t);
  const cases = {
    'wrong CA': [{ address: mtls, tls: { ca: file('other.pem'), cert: file('client.pem'), key: file('client-key.pem') } },
      'not signed by a CA this worker trusts', 'JOBWIRE_TLS_CA'],
    'no client certificate': [{ address: mtls, tls: { ca: file('ca.pem') } }, 'requires a client certificate', 'JOBWIRE_TLS_CERT'],
    'plaintext against TLS': [{ address: mtls }, 'serves TLS and this worker connected without it', 'JOBWIRE_TLS_CA'],
    'TLS against plaintext': [{ address: plain, tls: { ca: file('ca.pem') } }, 'does not serve TLS', '--tls-cert'],
    'a name the certificate does not hold': [
      { address: mtls, tls: { ca: file('ca.pem'), cert: file('client.pem'), key: file('client-key.pem'), serverName: 'jobwire.invalid' } },
      'does not name the address', 'JOBWIRE_TLS_SERVER_NAME'],
  };
  for (const [name, [opts, problem, fix]] of Object.entries(cases)) {
    await t.test(name, async () => {
      await assert.rejects(runBounded(worker(opts)), (err) => {
        assert.ok(err instanceof ConnectError, `${name}: ${err}`);
        assert.equal(err.kind, 'tls');
        assert.equal(err.code, grpc.status.UNAVAILABLE);
        assert.match(err.problem, new RegExp(problem));
        assert.match(err.fix, new RegExp(fix));
        return true;
      });
    });
  }
});

test('a refused token stops run() with the fix', { skip }, async (t) => {
  const addr = await serve(t, {
    tls: true,
    onStream: (call) => {
      call.on('data', () => call.emit('error', { code: grpc.status.UNAUTHENTICATED, details: 'the token is unknown' }));
      call.on('error', () => {});
    },
  });
  await assert.rejects(runBounded(worker({ address: addr, tls: { ca: file('ca.pem') }, token: 'jw_revoked' })), (err) => {
    assert.ok(err instanceof ConnectError, String(err));
    assert.equal(err.kind, 'auth');
    assert.equal(err.code, grpc.status.UNAUTHENTICATED);
    assert.match(err.fix, /JOBWIRE_TOKEN/);
    return true;
  });
});

test('a broker not there yet is waited for', async () => {
  // Nothing listens on the port: that is a broker not started yet, so the worker keeps
  // reconnecting until it is stopped.
  let failures = 0;
  const w = worker({ address: '127.0.0.1:1', logger: { ...quiet, warn: () => failures++ } });
  let settled = false;
  const done = w.run().finally(() => {
    settled = true;
  });
  const end = Date.now() + WAIT_MS;
  while (failures < 3 && !settled && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  assert.equal(settled, false, 'run() stopped although the broker may still come up');
  assert.ok(failures >= 3, `${failures} reconnects`);
  w.shutdown('test');
  await done;
});

test('fromEnv reaches a mutual-TLS broker and runs a job', { skip }, async (t) => {
  let stream;
  const streams = [];
  const addr = await serve(t, {
    tls: true,
    mutual: true,
    onStream: (call) => {
      streams.push(call);
      stream = call;
    },
  });
  const env = {
    JOBWIRE_ADDR: addr.replace('127.0.0.1', 'localhost'),
    JOBWIRE_TOKEN: 'jw_abc_secret',
    JOBWIRE_TLS_CA: file('ca.pem'),
    JOBWIRE_TLS_CERT: file('client.pem'),
    JOBWIRE_TLS_KEY: file('client-key.pem'),
  };
  assert.deepEqual(settingsFromEnv(env).tls, { ca: file('ca.pem'), cert: file('client.pem'), key: file('client-key.pem') });
  const w = Worker.fromEnv({ workerId: 'w1', capacity: 1, logger: quiet }, env);
  let ran = false;
  w.handle('echo', async () => {
    ran = true;
  });
  const done = w.run();
  const msgs = [];
  const until = async (cond, what) => {
    const end = Date.now() + WAIT_MS;
    while (!cond()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  await until(() => stream, 'a stream');
  stream.on('data', (m) => msgs.push(m));
  stream.on('error', () => {});
  await until(() => msgs.some((m) => m.message === 'hello'), 'hello');
  assert.deepEqual(stream.metadata.get('authorization'), ['Bearer jw_abc_secret']);
  stream.write({ welcome: { sessionId: 's', leaseDuration: { seconds: '30' }, heartbeatInterval: { seconds: '60' } } });
  stream.write({ assignment: { job: { id: '1', type: 'echo', payload: Buffer.from('{}'), maxAttempts: 1 }, attempt: 1, leaseToken: '100' } });
  await until(() => msgs.some((m) => m.message === 'result'), 'the result');
  assert.equal(ran, true);
  stream.write({ resultAck: { jobId: '1', leaseToken: '100', decision: 'DECISION_SUCCEEDED' } });
  w.shutdown('test');
  await until(() => msgs.some((m) => m.message === 'drain'), 'drain');
  stream.end();
  await done;
  assert.equal(streams.length, 1);
});
