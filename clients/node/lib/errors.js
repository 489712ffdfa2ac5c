'use strict';
// Failed calls become one error class per gRPC status code, like the Python client's
// graphengine.errors. The server's kind of error and its context (graph, node, tensor,
// stage) come from the standard google.rpc.Status it attaches in the
// `grpc-status-details-bin` trailer: one google.rpc.ErrorInfo of domain "graphengine".

const { status: grpcStatus } = require('@grpc/grpc-js');
const { statusTypes } = require('./protos');

const DOMAIN = 'graphengine';
const CONTEXT = ['graph', 'node', 'tensor', 'stage'];
const STATUS_DETAILS = 'grpc-status-details-bin';
const ERROR_INFO_TYPE = 'google.rpc.ErrorInfo';

// Status code number -> name ("INVALID_ARGUMENT"), from grpc-js's own enum.
const CODE_NAMES = new Map(Object.entries(grpcStatus)
  .filter(([name, value]) => typeof value === 'number' && name !== 'OK')
  .map(([name, value]) => [value, name]));

class GraphEngineError extends Error {
  /**
   * @param {string} message the server's message, verbatim (it names what is at fault)
   * @param {object} [fields] code (status name), grpcCode, errorType, graph, node, tensor,
   *   stage, metadata (the call's trailing grpc.Metadata)
   */
  constructor(message, fields = {}) {
    super(message);
    this.name = new.target.name;
    this.code = fields.code ?? new.target.code ?? 'UNKNOWN';
    this.grpcCode = fields.grpcCode ?? grpcStatus[this.code] ?? grpcStatus.UNKNOWN;
    // The server's finer kind (InvalidGraph, InvalidInput and InvalidModel all arrive as
    // INVALID_ARGUMENT); null when the server sent no details.
    this.errorType = fields.errorType ?? null;
    for (const key of CONTEXT) this[key] = fields[key] ?? null;
    // The call's trailing grpc.Metadata, for callers that want more than the above; not
    // enumerable, so that printing an error shows what went wrong and not the trailers.
    Object.defineProperty(this, 'metadata', { value: fields.metadata ?? null, writable: true });
  }
}

const CLASSES = {};
for (const [name, className] of [
  ['CANCELLED', 'CancelledError'], ['UNKNOWN', 'UnknownError'],
  ['INVALID_ARGUMENT', 'InvalidArgumentError'], ['DEADLINE_EXCEEDED', 'DeadlineExceededError'],
  ['NOT_FOUND', 'NotFoundError'], ['ALREADY_EXISTS', 'AlreadyExistsError'],
  ['PERMISSION_DENIED', 'PermissionDeniedError'],
  ['RESOURCE_EXHAUSTED', 'ResourceExhaustedError'],
  ['FAILED_PRECONDITION', 'FailedPreconditionError'], ['ABORTED', 'AbortedError'],
  ['OUT_OF_RANGE', 'OutOfRangeError'], ['UNIMPLEMENTED', 'UnimplementedError'],
  ['INTERNAL', 'InternalError'], ['UNAVAILABLE', 'UnavailableError'],
  ['DATA_LOSS', 'DataLossError'], ['UNAUTHENTICATED', 'UnauthenticatedError'],
]) {
  // A named class per code, so that stack traces and `err.name` say which.
  const cls = { [className]: class extends GraphEngineError {} }[className];
  cls.code = name;
  CLASSES[name] = cls;
}

/** The error class for a status code, given as its number or its name. */
function errorClass(code) {
  const name = typeof code === 'number' ? CODE_NAMES.get(code) : code;
  return CLASSES[name] ?? CLASSES.UNKNOWN;
}

/** {errorType, graph, node, tensor, stage} from a serialized google.rpc.Status, or null when
 * the bytes are not one or carry no ErrorInfo of this project's domain. */
function decodeStatusDetails(bytes) {
  const { Status, ErrorInfo } = statusTypes();
  let status;
  try {
    status = Status.decode(bytes);
  } catch {
    return null; // not ours to fail on: the status code and message still stand
  }
  for (const detail of status.details) {
    if (!detail.type_url.endsWith(`/${ERROR_INFO_TYPE}`)) continue;
    let info;
    try {
      info = ErrorInfo.decode(detail.value);
    } catch {
      continue;
    }
    if (info.domain !== DOMAIN) continue;
    const found = { errorType: info.reason || null };
    for (const key of CONTEXT) {
      if (Object.prototype.hasOwnProperty.call(info.metadata, key)) found[key] = info.metadata[key];
    }
    return found;
  }
  return null;
}

/** The GraphEngineError subclass for a grpc-js ServiceError (or any error with `code`,
 * `details` and `metadata`). Errors that are not gRPC's are returned unchanged. */
function fromServiceError(err) {
  if (err instanceof GraphEngineError || typeof err?.code !== 'number') return err;
  const cls = errorClass(err.code);
  const fields = { code: CODE_NAMES.get(err.code) ?? 'UNKNOWN', grpcCode: err.code };
  const metadata = err.metadata;
  const raw = typeof metadata?.get === 'function' ? metadata.get(STATUS_DETAILS) : [];
  for (const value of raw) {
    const context = Buffer.isBuffer(value) ? decodeStatusDetails(value) : null;
    if (context !== null) {
      Object.assign(fields, context);
      break;
    }
  }
  if (metadata !== undefined) fields.metadata = metadata;
  return new cls(err.details || err.message || fields.code, fields);
}

module.exports = {
  GraphEngineError, errorClass, fromServiceError, decodeStatusDetails,
  DOMAIN, STATUS_DETAILS, ...Object.fromEntries(Object.values(CLASSES).map((c) => [c.name, c])),
};
