'use strict';

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

/**
 * Where the jobwire .proto files are: a packed copy inside the package (see the prepack script),
 * else the repository's proto/ folder. Loading them at run time leaves no generated code to
 * keep in sync.
 */
function protoRoot() {
  const packed = path.join(__dirname, '..', 'proto');
  if (fs.existsSync(path.join(packed, 'jobwire', 'v1', 'worker_service.proto'))) return packed;
  return path.join(__dirname, '..', '..', '..', 'proto');
}

/** Options shared by the library and its tests: int64 as decimal strings, enums as names. */
const LOADER_OPTIONS = {
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

let cached;

/** The loaded `jobwire.v1` package: message types and service constructors. */
function loadJobwire(root = protoRoot()) {
  if (cached && cached.root === root) return cached.pkg;
  const def = protoLoader.loadSync(
    ['jobwire/v1/worker_service.proto', 'jobwire/v1/producer_service.proto'],
    { ...LOADER_OPTIONS, includeDirs: [root] },
  );
  const pkg = /** @type {any} */ (grpc.loadPackageDefinition(def)).jobwire.v1;
  cached = { root, pkg };
  return pkg;
}

module.exports = { loadJobwire, protoRoot, LOADER_OPTIONS };
