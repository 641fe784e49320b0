// Compiled, not run, by test/types.test.js: a TypeScript program using the package the way its
// README does, against index.d.ts.
import {
  Backoff,
  CancelReason,
  ConnectError,
  FatalError,
  JobCancelledError,
  RetryAfterError,
  Worker,
  classify,
  retryAfter,
  settingsFromEnv,
  type Classified,
  type JobContext,
  type ParentResult,
} from '@jobwire/worker';

interface Email {
  to?: string;
}

const worker = new Worker({
  address: '127.0.0.1:7070',
  capacity: 4,
  queues: ['default'],
  backoff: new Backoff({ baseMs: 100 }),
  token: process.env.JOBWIRE_TOKEN,
  tls: { ca: 'ca.pem' },
});

worker.handle('email.send', async (ctx: JobContext) => {
  const data = ctx.json<Email>();
  if (!data.to) throw new FatalError('no recipient');
  const id: string = ctx.id;
  const payload: Buffer = ctx.payload;
  const timeout: number | undefined = ctx.attemptTimeoutMs;
  if (ctx.signal.aborted && ctx.cancelReason === CancelReason.TIMEOUT) return;
  if (payload.length > 1_000_000) throw new RetryAfterError(30_000, `job ${id} too large for now (${timeout})`);
  if (ctx.attempt < ctx.maxAttempts) throw retryAfter(new Error('mail API busy'), 1000);
});

worker.handle('report.build', async (ctx: JobContext) => {
  const parents: ParentResult[] = ctx.parentResults;
  const rows: number = parents.reduce((n, p) => n + p.json<{ rows: number }>().rows, 0);
  ctx.progress(0.5, `${rows} rows from ${parents.map((p) => `${p.jobId} (${p.state})`).join(', ')}`);
  ctx.progress(null, 'only a message');
  ctx.setResult(Buffer.from('raw'));
  return { rows };
});

const fromEnv: Worker = Worker.fromEnv({ capacity: 4 });
const envAddress: string = settingsFromEnv(process.env).address;
fromEnv.run().catch((err: unknown) => {
  if (err instanceof ConnectError && err.kind === 'tls') console.error(err.problem, err.fix, envAddress);
});

const stop: () => void = worker.installSignalHandlers();
const c: Classified = classify(new JobCancelledError(CancelReason.SHUTDOWN));
const running: Promise<void> = worker.run();
running.then(stop, (err: unknown) => console.error(err, c.kind));
worker.shutdown('done');
