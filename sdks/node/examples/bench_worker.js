#!/usr/bin/env node
'use strict';

// A no-op worker for the benchmark (`jobwire-bench --worker-cmd`): serves job type `noop`.
//
//   make bench BENCH_ARGS="--scenarios drain --worker-cmd 'node sdks/node/examples/bench_worker.js'"

const { Worker } = require('..');

const worker = new Worker({
  address: process.env.JOBWIRE_ADDR || '127.0.0.1:7070',
  workerId: process.env.JOBWIRE_WORKER_ID || undefined,
  capacity: Number(process.env.JOBWIRE_CONCURRENCY || 256),
});

worker.handle('noop', async () => {});

worker.installSignalHandlers();
worker.run().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
