'use strict';

const fs = require('node:fs');
const path = require('node:path');
const protobuf = require('protobufjs');

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

/**
 * The loaded `jobwire.v1` package: message types and service constructors, through
 * @grpc/proto-loader (messages as plain objects shaped by LOADER_OPTIONS). The worker itself uses
 * workerStream() instead; this is for programs and tests that play the broker's side.
 */
function loadJobwire(root = protoRoot()) {
  if (cached && cached.root === root) return cached.pkg;
  const grpc = require('@grpc/grpc-js');
  const protoLoader = require('@grpc/proto-loader');
  const def = protoLoader.loadSync(
    ['jobwire/v1/worker_service.proto', 'jobwire/v1/producer_service.proto'],
    { ...LOADER_OPTIONS, includeDirs: [root] },
  );
  const pkg = /** @type {any} */ (grpc.loadPackageDefinition(def)).jobwire.v1;
  cached = { root, pkg };
  return pkg;
}

/** The gRPC method of the worker stream. */
const CONNECT_PATH = '/jobwire.v1.WorkerService/Connect';

let stream;

/**
 * How the worker's side of WorkerService.Connect is written and read, with protobufjs types
 * loaded from worker_service.proto alone.
 *
 * Every message keeps the plain shape of LOADER_OPTIONS (int64 as decimal strings, enums as
 * names, a oneof's field name under its own name), but for the two of every job that cost the
 * most to convert: an Assignment is handed over as decoded (int64 fields as Long, see
 * int64String()), of its Job only what JobContext reads, the rest decoded and converted when
 * ctx.job is read (plainJob()),
 * and Started and a successful Result, which the worker builds itself with fields of the right
 * types, are encoded without fromObject's copy. A batch frame (ConnectRequest.batch) is encoded
 * from its messages the same way; a ConnectResponse.batch is cut into its messages, each read as
 * if it had come alone.
 * @returns {{path: string, serialize: (msg: any) => Buffer, deserialize: (buf: Buffer) => any, plainJob: (assignment: any) => any, stateName: (state: number | string) => string}}
 */
function workerStream() {
  if (stream) return stream;
  const root = new protobuf.Root();
  const dir = protoRoot();
  // Imports are relative to the proto folder; google/protobuf/* come bundled with protobufjs.
  root.resolvePath = (origin, target) => (path.isAbsolute(target) ? target : path.join(dir, target));
  root.loadSync('jobwire/v1/worker_service.proto');
  root.resolveAll();
  const Request = root.lookupType('jobwire.v1.ConnectRequest');
  const Response = root.lookupType('jobwire.v1.ConnectResponse');
  const Job = root.lookupType('jobwire.v1.Job');
  const Assignment = root.lookupType('jobwire.v1.Assignment');

  // An Assignment read only as far as JobContext needs: its own fields with the Job left as
  // bytes, and of the Job what JobContext reads (JobHead). Both are cut from the real types, so
  // they follow the .proto files; the whole Job is decoded from the bytes when ctx.job is read.
  const ns = root.define('jobwire.worker');
  const copy = (f, type = f.type) => (f.map ? new protobuf.MapField(f.name, f.id, f.keyType, type) : new protobuf.Field(f.name, f.id, type, f.repeated ? 'repeated' : undefined));
  const JobHead = new protobuf.Type('JobHead');
  for (const name of ['id', 'type', 'queue', 'payload', 'maxAttempts', 'metadata']) JobHead.add(copy(Job.fields[name]));
  const AssignmentHead = new protobuf.Type('AssignmentHead');
  for (const f of Assignment.fieldsArray) {
    // A message field keeps its type by full name: the head lives in another namespace.
    if (f.name !== 'leaseDeadline') AssignmentHead.add(copy(f, f.name === 'job' ? 'bytes' : f.resolvedType?.fullName ?? f.type));
  }
  ns.add(JobHead).add(AssignmentHead);
  root.resolveAll();
  const assignmentTag = (Response.fields.assignment.id << 3) | 2; // length-delimited

  const batchTag = (Response.fields.batch.id << 3) | 2;
  const batchItemTag = (Response.fields.batch.resolvedType.fields.messages.id << 3) | 2;

  // A request as encode() takes it: Started and a successful Result, which the worker builds
  // itself, as they are; anything else through fromObject.
  const wire = (msg) => {
    const started = msg.started;
    if (started) return { started: { jobId: wireId(started.jobId), leaseToken: started.leaseToken } };
    const result = msg.result;
    if (result && result.success && !result.failure) {
      return { result: { jobId: wireId(result.jobId), leaseToken: result.leaseToken, success: result.success } };
    }
    return Request.fromObject(msg);
  };
  const serialize = (msg) => {
    const batch = msg.batch;
    if (batch) return Request.encode({ batch: { messages: batch.messages.map(wire) } }).finish();
    return Request.encode(wire(msg)).finish();
  };
  // A decoded response in the plain shape, but for an Assignment (see above).
  const plain = (m) => {
    if (m.message === 'assignment') return { message: 'assignment', assignment: m.assignment };
    if (m.message === 'batch') return { message: 'batch', batch: { messages: m.batch.messages.map(plain) } };
    // toObject() writes a Long through its general toString; a number it writes with String().
    if (m.message === 'resultAck') m.resultAck.jobId = int64Narrowed(m.resultAck.jobId);
    return Response.toObject(m, LOADER_OPTIONS);
  };
  // A batch as the broker sends it (field 8 holding its messages and nothing else) is cut into
  // its messages, each read as if it had come alone; null when buf is not one. r has read the
  // batch's tag.
  const batchOf = (r, buf) => {
    const len = r.uint32();
    if (r.pos + len !== buf.length) return null;
    const messages = [];
    while (r.pos < buf.length) {
      if (r.uint32() !== batchItemTag) return null;
      const n = r.uint32();
      const start = r.pos;
      if (start + n > buf.length) return null;
      messages.push(deserialize(buf.subarray(start, start + n)));
      r.pos = start + n;
    }
    return { message: 'batch', batch: { messages } };
  };
  const deserialize = (buf) => {
    // A response that is an Assignment and nothing else (as the broker sends one) is read
    // through the head types; anything else is decoded whole.
    const r = protobuf.Reader.create(buf);
    if (buf.length > 0) {
      const tag = r.uint32();
      if (tag === assignmentTag) {
        const len = r.uint32();
        if (r.pos + len === buf.length) {
          const a = AssignmentHead.decode(r, len);
          const bytes = a.job;
          a.job = JobHead.decode(bytes);
          a.jobBytes = bytes;
          return { message: 'assignment', assignment: a };
        }
      } else if (tag === batchTag) {
        const batch = batchOf(r, buf);
        if (batch) return batch;
      }
    }
    return plain(Response.decode(buf));
  };
  /**
   * The whole Job of a decoded Assignment, in the plain shape.
   * @param {any} assignment as deserialize() hands it over
   */
  const plainJob = (assignment) =>
    Job.toObject(assignment.jobBytes ? Job.decode(assignment.jobBytes) : assignment.job, LOADER_OPTIONS);
  const JobState = root.lookupEnum('jobwire.v1.JobState');
  /**
   * A JobState as a name ('JOB_STATE_SUCCEEDED'), from its number (as decode() gives it) or its
   * name already; a number the .proto does not know as 'JOB_STATE_<n>'.
   * @param {number | string} state
   */
  const stateName = (state) => (typeof state === 'number' ? JobState.valuesById[state] ?? `JOB_STATE_${state}` : String(state));
  stream = { path: CONNECT_PATH, serialize, deserialize, plainJob, stateName };
  return stream;
}

/**
 * A job id (a decimal string) as encode() takes it: a number when it is exactly one, which
 * encodes without a Long made from the string.
 * @param {string} id
 */
function wireId(id) {
  const n = Number(id);
  return Number.isSafeInteger(n) ? n : id;
}

const TWO_32 = 4294967296;
const SAFE_HIGH = 0x200000; // |high| below this: high * 2^32 + low is a safe integer

/**
 * A decoded int64 as a number when a double holds it exactly, else as it is.
 * @param {any} v
 */
function int64Narrowed(v) {
  if (typeof v === 'object' && v.high < SAFE_HIGH && v.high >= -SAFE_HIGH && !v.unsigned) return v.high * TWO_32 + (v.low >>> 0);
  return v;
}

/**
 * An int64 as a decimal string, from a protobufjs Long (as decode() gives it), a number, or a
 * string already. Ids fit a double in practice, and this skips Long's general conversion then.
 * @param {any} v
 * @returns {string}
 */
function int64String(v) {
  if (typeof v === 'string') return v;
  const n = int64Narrowed(v);
  return typeof n === 'number' ? String(n) : n.toString();
}

module.exports = { loadJobwire, protoRoot, LOADER_OPTIONS, workerStream, int64String };
