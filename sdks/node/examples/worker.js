#!/usr/bin/env node
'use strict';

// A minimal Jobwire worker: greets people.
//
//   make sdk-deps   # once, in the checkout: the library's dependencies
//   JOBWIRE_ADDR=127.0.0.1:7070 node sdks/node/examples/worker.js
//   go run ./cmd/jobwire enqueue --addr 127.0.0.1:7070 --type greet --payload '{"name": "Ada"}'

const { setTimeout: sleep } = require('node:timers/promises');
const { Worker, FatalError } = require('@jobwire/worker');

// Address, token and TLS from JOBWIRE_ADDR, JOBWIRE_TOKEN and JOBWIRE_TLS_*.
const worker = Worker.fromEnv({
  workerId: process.env.JOBWIRE_WORKER_ID || undefined,
  capacity: Number(process.env.JOBWIRE_CAPACITY || 8),
});

worker.handle('greet', async (ctx) => {
  const { name } = ctx.json(); // malformed JSON throws SyntaxError: FATAL, straight to the DLQ
  if (!name) throw new FatalError('payload needs a name');
  await sleep(100, undefined, { signal: ctx.signal }); // stands in for real work; rejects on a cancel
  console.error(`hello, ${name} (job ${ctx.id}, attempt ${ctx.attempt})`);
});

worker.installSignalHandlers();
worker.run().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
