// Type declarations of @graphengine/client (written by hand; the code is lib/*.js).

import type { Metadata } from '@grpc/grpc-js';

/** Element types, named as numpy names them. */
export type DType =
  | 'float32' | 'float64' | 'float16' | 'bfloat16'
  | 'int8' | 'int16' | 'int32' | 'int64'
  | 'uint8' | 'uint16' | 'uint32' | 'uint64' | 'bool';

export const DTYPES: DType[];
export const DEFAULT_MAX_MESSAGE_BYTES: number;

/** The typed array of each dtype: float16 and bfloat16 as raw 16-bit patterns, bool as
 * one byte (0 or 1) per element. */
export interface DataOf {
  float32: Float32Array; float64: Float64Array; float16: Uint16Array; bfloat16: Uint16Array;
  int8: Int8Array; int16: Int16Array; int32: Int32Array; int64: BigInt64Array;
  uint8: Uint8Array; uint16: Uint16Array; uint32: Uint32Array; uint64: BigUint64Array;
  bool: Uint8Array;
}

export type TypedArray = DataOf[DType];

/** A tensor: row-major elements with their shape. */
export interface Tensor<D extends DType = DType> {
  dtype: D;
  shape: number[];
  data: DataOf[D];
}

/** What an input may be: a typed array (1-D, dtype from its type), or data with a shape and,
 * for float16 / bfloat16 / bool, a dtype. */
export type TensorInput = TypedArray | { data: TypedArray; shape?: number[]; dtype?: DType };
export type Inputs = Record<string, TensorInput>;
export type Outputs = Record<string, Tensor>;

export interface ClientOptions {
  /** Deadline of every call, in milliseconds (none by default). */
  timeoutMs?: number;
  /** Bearer token, sent as `authorization: Bearer <token>` with every call. */
  token?: string;
  /** More metadata sent with every call. */
  metadata?: Record<string, string>;
  /** TLS with the system's roots; implied by rootCertificates / privateKey. */
  tls?: boolean;
  /** PEM bytes or a file path. */
  rootCertificates?: Buffer | string;
  privateKey?: Buffer | string;
  certificateChain?: Buffer | string;
  /** The name the server's certificate is checked against, if not the address's host. */
  serverName?: string;
  /** Largest message sent or received (default 256 MiB, as the server's). */
  maxMessageBytes?: number;
  /** More grpc-js channel options. */
  channelOptions?: Record<string, unknown>;
  /** The folder holding graphengine/v1/session.proto (found by default). */
  protoDir?: string;
}

export interface SessionOptions {
  maxStreams?: number;
  memoryLimitBytes?: number;
  options?: Record<string, string>;
  precision?: string;
  instances?: number;
}

export interface SessionInfo {
  sessionId: string;
  options: Required<SessionOptions>;
  createdUnix: number;
  idleSeconds: number;
  graphIds: number[];
  deviceBytes: number;
  activeRuns: number;
}

export interface TensorDesc {
  name: string;
  /** A DType, or the server's name for another ("string"). */
  dtype: DType | string;
  /** Sizes, or symbol names ("batch") for dimensions given per run; null: unknown rank. */
  shape: Array<number | string> | null;
}

export interface GraphInfo {
  graphId: number;
  name: string;
  inputs: TensorDesc[];
  outputs: TensorDesc[];
  numNodes: number;
  compiled: boolean;
  gears: number[];
  deviceBytes: number;
  compiledSignatures: number;
}

/** What the compiler did (graphengine.v1.CompileReport, camelCase). */
export interface CompileReport {
  graph: string;
  passes: Array<{ stage: string; name: string; seconds: number; changed: boolean; detail: string }>;
  partitions: Array<{ index: number; engine: string; nodes: string[]; inputs: string[]; outputs: string[] }>;
  placements: Array<{ node: string; opType: string; engine: string; rejections: string[] }>;
  fusions: string[];
  memory: { arenaBytes: number; lowerBoundBytes: number; weightBytes: number; strategy: string };
  streams: number;
  events: number;
  tasks: number;
  nodesBefore: number;
  nodesAfter: number;
  totalSeconds: number;
  flops: number;
}

/** A graphengine.v1.GraphDef as a plain object (camelCase fields, enums by name). */
export interface GraphDef {
  name?: string;
  inputs?: object[];
  outputs?: object[];
  nodes?: object[];
  constants?: object[];
}

export interface KServeTensorMetadata {
  name: string;
  datatype: string;
  /** -1 for a dimension that varies per request. */
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: KServeTensorMetadata[];
  outputs: KServeTensorMetadata[];
}

export interface InferResult {
  modelName: string;
  modelVersion: string;
  id: string;
  outputs: Outputs;
}

export class Client {
  constructor(address: string, options?: ClientOptions);
  readonly address: string;
  readonly timeoutMs: number | null;
  readonly maxMessageBytes: number;
  createSession(options?: SessionOptions): Promise<Session>;
  attach(sessionId: string): Session;
  listSessions(): Promise<SessionInfo[]>;
  serverLive(): Promise<boolean>;
  serverReady(): Promise<boolean>;
  serverMetadata(): Promise<{ name: string; version: string; extensions: string[] }>;
  modelReady(name: string, options?: { version?: string }): Promise<boolean>;
  modelMetadata(name: string, options?: { version?: string }): Promise<ModelMetadata>;
  infer(model: string, inputs: Inputs,
    options?: { version?: string; outputs?: string[]; id?: string; timeoutMs?: number }): Promise<InferResult>;
  waitForReady(timeoutMs?: number): Promise<void>;
  close(): void;
}

export class Session {
  readonly id: string;
  readonly closed: boolean;
  /** ONNX / frozen TensorFlow / offline model / binary GraphDef bytes, a path to such a
   * file, or a GraphDef object; resolves with the graph id. */
  addGraph(model: Uint8Array | string | GraphDef, options?: { name?: string; gears?: number[] }): Promise<number>;
  compileGraph(graphId: number, options?: { inputShapes?: Record<string, number[]> }): Promise<CompileReport>;
  runGraph(graphId: number, inputs: Inputs,
    options?: { outputNames?: string[]; timeoutMs?: number }): Promise<Outputs>;
  graphInfo(graphId: number): Promise<GraphInfo>;
  removeGraph(graphId: number): Promise<void>;
  exportModel(graphId: number, options?: { inputShapes?: Record<string, number[]> }): Promise<Buffer>;
  importModel(data: Uint8Array | string, options?: { name?: string }): Promise<number>;
  close(): Promise<void>;
}

export type StatusName =
  | 'CANCELLED' | 'UNKNOWN' | 'INVALID_ARGUMENT' | 'DEADLINE_EXCEEDED' | 'NOT_FOUND'
  | 'ALREADY_EXISTS' | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED' | 'FAILED_PRECONDITION'
  | 'ABORTED' | 'OUT_OF_RANGE' | 'UNIMPLEMENTED' | 'INTERNAL' | 'UNAVAILABLE' | 'DATA_LOSS'
  | 'UNAUTHENTICATED';

/** A failed call: the status, the server's message, and the context from its
 * google.rpc.ErrorInfo (null where the server sent none). */
export class GraphEngineError extends Error {
  constructor(message: string, fields?: Partial<Pick<GraphEngineError,
    'code' | 'grpcCode' | 'errorType' | 'graph' | 'node' | 'tensor' | 'stage' | 'metadata'>>);
  /** The status code's name. */
  code: StatusName;
  /** The status code's number. */
  grpcCode: number;
  /** The server's kind of error, e.g. "InvalidGraph", "InvalidInput", "InvalidModel". */
  errorType: string | null;
  graph: string | null;
  node: string | null;
  tensor: string | null;
  stage: string | null;
  /** The call's trailing metadata. */
  metadata: Metadata | null;
}

export class CancelledError extends GraphEngineError {}
export class UnknownError extends GraphEngineError {}
export class InvalidArgumentError extends GraphEngineError {}
export class DeadlineExceededError extends GraphEngineError {}
export class NotFoundError extends GraphEngineError {}
export class AlreadyExistsError extends GraphEngineError {}
export class PermissionDeniedError extends GraphEngineError {}
export class ResourceExhaustedError extends GraphEngineError {}
export class FailedPreconditionError extends GraphEngineError {}
export class AbortedError extends GraphEngineError {}
export class OutOfRangeError extends GraphEngineError {}
export class UnimplementedError extends GraphEngineError {}
export class InternalError extends GraphEngineError {}
export class UnavailableError extends GraphEngineError {}
export class DataLossError extends GraphEngineError {}
export class UnauthenticatedError extends GraphEngineError {}

export const DOMAIN: 'graphengine';
export const STATUS_DETAILS: 'grpc-status-details-bin';
/** The class for a status code (number or name); UnknownError for any other. */
export function errorClass(code: number | StatusName): typeof GraphEngineError;
/** The typed error for a grpc-js ServiceError; other values are returned unchanged. */
export function fromServiceError(err: unknown): unknown;
/** The context from a serialized google.rpc.Status, or null. */
export function decodeStatusDetails(bytes: Uint8Array): {
  errorType: string | null; graph?: string; node?: string; tensor?: string; stage?: string;
} | null;
