'use strict';
// The Node.js client of a GraphEngine server: the session API (graphengine.v1.GraphEngine)
// and KServe v2 inference (inference.GRPCInferenceService) on one channel. It mirrors the
// Python client (graphengine.clients): Client -> createSession() -> Session with addGraph,
// compileGraph, runGraph, ..., close. Every method returns a Promise; a failed call rejects
// with the errors.js class of its status code.

const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { services } = require('./protos');
const { fromServiceError } = require('./errors');
const tensors = require('./tensors');

const DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024;
const SESSION_OPTION_KEYS = new Set(['maxStreams', 'memoryLimitBytes', 'options', 'precision',
  'instances']);

/** PEM bytes given as a Buffer or a file path. */
function pem(value) {
  if (value === undefined || value === null) return null;
  return Buffer.isBuffer(value) ? value : fs.readFileSync(value);
}

function credentialsFor(opts) {
  const tls = opts.tls || opts.rootCertificates || opts.privateKey;
  if (!tls) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(pem(opts.rootCertificates), pem(opts.privateKey),
    pem(opts.certificateChain));
}

function checkCount(what, value, { min = 0 } = {}) {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${what} must be an integer >= ${min}, not ${String(value)}`);
  }
  return value;
}

function inputShapesToWire(inputShapes) {
  if (inputShapes === undefined || inputShapes === null) return [];
  if (typeof inputShapes !== 'object') throw new TypeError('inputShapes must be {name: number[]}');
  return Object.entries(inputShapes).map(([name, shape]) => {
    if (!Array.isArray(shape)) throw new TypeError(`inputShapes['${name}'] must be an array`);
    shape.forEach((d) => checkCount(`inputShapes['${name}'] dimension`, d));
    return { name, shape };
  });
}

function sessionOptionsToWire(options) {
  if (options === undefined || options === null) return {};
  for (const key of Object.keys(options)) {
    if (!SESSION_OPTION_KEYS.has(key)) {
      throw new TypeError(`unknown session option '${key}'; known: ${[...SESSION_OPTION_KEYS].join(', ')}`);
    }
  }
  return { ...options };
}

/** Decimal-string int64 fields of a decoded message as numbers (checked to be exact). */
function num(value) {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new RangeError(`integer ${value} from the server is beyond 2**53`);
  return n;
}

function descFromWire(desc) {
  return {
    name: desc.name,
    dtype: desc.dtype.replace(/^DT_/, '').toLowerCase(),
    // A symbolic dimension stays its name (e.g. "batch").
    shape: desc.unknownRank ? null : desc.shape.map((d) => (d.value === 'symbol' ? d.symbol : num(d.size))),
  };
}

function graphInfoFromWire(info) {
  return {
    graphId: info.graphId,
    name: info.name,
    inputs: info.inputs.map(descFromWire),
    outputs: info.outputs.map(descFromWire),
    numNodes: info.numNodes,
    compiled: info.compiled,
    gears: info.gears.map(num),
    deviceBytes: num(info.deviceBytes),
    compiledSignatures: info.compiledSignatures,
  };
}

function reportFromWire(report) {
  const memory = report.memory ?? {};
  return {
    ...report,
    memory: {
      arenaBytes: num(memory.arenaBytes ?? 0),
      lowerBoundBytes: num(memory.lowerBoundBytes ?? 0),
      weightBytes: num(memory.weightBytes ?? 0),
      strategy: memory.strategy ?? '',
    },
  };
}

class Client {
  /**
   * @param {string} address "host:port"
   * @param {object} [opts] timeoutMs (deadline of every call; none by default), token (a
   *   bearer token), metadata ({key: value} sent with every call), tls / rootCertificates /
   *   privateKey / certificateChain (PEM Buffers or paths) / serverName, maxMessageBytes,
   *   channelOptions (extra grpc-js channel options), protoDir (the .proto folder).
   */
  constructor(address, opts = {}) {
    if (typeof address !== 'string' || !address) throw new TypeError('address must be "host:port"');
    this.address = address;
    this.timeoutMs = opts.timeoutMs ?? null;
    if (this.timeoutMs !== null) checkCount('timeoutMs', this.timeoutMs, { min: 1 });
    this._metadata = new grpc.Metadata();
    for (const [key, value] of Object.entries(opts.metadata ?? {})) this._metadata.add(key, value);
    if (opts.token) this._metadata.set('authorization', `Bearer ${opts.token}`);
    const maxBytes = checkCount('maxMessageBytes', opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
      { min: 1 });
    const channelOptions = {
      'grpc.max_send_message_length': maxBytes,
      'grpc.max_receive_message_length': maxBytes,
      ...(opts.serverName ? { 'grpc.ssl_target_name_override': opts.serverName } : {}),
      ...(opts.channelOptions ?? {}),
    };
    this.maxMessageBytes = maxBytes;
    const { GraphEngine, GRPCInferenceService } = services(opts.protoDir);
    const credentials = credentialsFor(opts);
    this._sessions = new GraphEngine(address, credentials, channelOptions);
    // The second stub shares the first one's channel.
    this._kserve = new GRPCInferenceService(address, credentials,
      { ...channelOptions, channelOverride: this._sessions.getChannel() });
  }

  /** One unary call: resolves with the response, rejects with a GraphEngineError. */
  _unary(stub, method, request, timeoutMs) {
    const timeout = timeoutMs ?? this.timeoutMs;
    const options = timeout === null ? {} : { deadline: Date.now() + timeout };
    // gRPC reports a failure from its own event loop frames; the error gets the frames of
    // the caller's call instead, which say which call of the program failed.
    const site = {};
    Error.captureStackTrace(site, this._unary);
    return new Promise((resolve, reject) => {
      stub[method](request, this._metadata.clone(), options, (err, response) => {
        if (!err) {
          resolve(response);
          return;
        }
        const error = fromServiceError(err);
        const frames = site.stack.slice(site.stack.indexOf('\n'));
        error.stack = `${error.name}: ${error.message}${frames}`;
        reject(error);
      });
    });
  }

  /** Open a session; `options`: maxStreams, memoryLimitBytes, options ({string: string}),
   * precision, instances. */
  async createSession(options) {
    const request = { options: sessionOptionsToWire(options) };
    const response = await this._unary(this._sessions, 'CreateSession', request);
    return new Session(this, response.sessionId);
  }

  /** A handle on a session that already exists (e.g. one another process opened). */
  attach(sessionId) {
    return new Session(this, sessionId);
  }

  /** This identity's open sessions. */
  async listSessions() {
    const response = await this._unary(this._sessions, 'ListSessions', {});
    return response.sessions.map((s) => ({
      sessionId: s.sessionId,
      options: { ...s.options, memoryLimitBytes: num(s.options.memoryLimitBytes) },
      createdUnix: s.createdUnix,
      idleSeconds: s.idleSeconds,
      graphIds: s.graphIds,
      deviceBytes: num(s.deviceBytes),
      activeRuns: s.activeRuns,
    }));
  }

  // ---- KServe v2 ------------------------------------------------------------------------
  async serverLive() {
    return (await this._unary(this._kserve, 'ServerLive', {})).live;
  }

  async serverReady() {
    return (await this._unary(this._kserve, 'ServerReady', {})).ready;
  }

  async serverMetadata() {
    const r = await this._unary(this._kserve, 'ServerMetadata', {});
    return { name: r.name, version: r.version, extensions: r.extensions };
  }

  async modelReady(name, { version = '' } = {}) {
    return (await this._unary(this._kserve, 'ModelReady', { name, version })).ready;
  }

  /** {name, versions, platform, inputs, outputs}; a tensor's shape has -1 for a dimension
   * that varies per request. */
  async modelMetadata(name, { version = '' } = {}) {
    const r = await this._unary(this._kserve, 'ModelMetadata', { name, version });
    const tensor = (t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(num) });
    return {
      name: r.name, versions: r.versions, platform: r.platform,
      inputs: r.inputs.map(tensor), outputs: r.outputs.map(tensor),
    };
  }

  /**
   * KServe v2 ModelInfer. `inputs`: {name: typed array or {data, shape, dtype}}; options:
   * version, outputs (names to return; all by default), id, timeoutMs.
   * Resolves with {modelName, modelVersion, id, outputs: {name: {dtype, shape, data}}}.
   */
  async infer(model, inputs, { version = '', outputs, id = '', timeoutMs } = {}) {
    const request = {
      modelName: model,
      modelVersion: version,
      id,
      ...tensors.toKServeInputs(inputs),
      outputs: (outputs ?? []).map((name) => ({ name })),
    };
    const r = await this._unary(this._kserve, 'ModelInfer', request, timeoutMs);
    return {
      modelName: r.modelName, modelVersion: r.modelVersion, id: r.id,
      outputs: tensors.fromKServeOutputs(r),
    };
  }

  /** Resolves once the channel is connected; rejects after `timeoutMs`. */
  waitForReady(timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      this._sessions.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve()));
    });
  }

  close() {
    this._kserve.close();
    this._sessions.close();
  }
}

class Session {
  constructor(client, sessionId) {
    this._client = client;
    this.id = sessionId;
    this.closed = false;
  }

  _call(method, request, timeoutMs) {
    return this._client._unary(this._client._sessions, method,
      { sessionId: this.id, ...request }, timeoutMs);
  }

  /** Model bytes from a Buffer / typed array / file path; null for anything else. */
  _modelBytes(model) {
    if (typeof model === 'string') {
      const { size } = fs.statSync(model);
      if (size > this._client.maxMessageBytes) {
        throw new RangeError(`${model}: ${size} bytes is more than the client's message limit `
          + `(${this._client.maxMessageBytes} bytes, option maxMessageBytes)`);
      }
      if (/\.(pbtxt|txt)$/.test(model)) {
        throw new TypeError(`${model}: text GraphDefs are read by the Python client only; `
          + 'send a binary GraphDef, ONNX, frozen TensorFlow or offline model file');
      }
      return fs.readFileSync(model);
    }
    if (ArrayBuffer.isView(model)) return Buffer.from(model.buffer, model.byteOffset, model.byteLength);
    return null;
  }

  /** The AddGraphRequest `model` oneof for what the caller passed. */
  _modelField(model) {
    const bytes = this._modelBytes(model);
    // The server tells ONNX, frozen TensorFlow, offline and GraphDef bytes apart.
    if (bytes !== null) return { onnxModel: bytes };
    if (model !== null && typeof model === 'object') return { graph: model };
    throw new TypeError('addGraph: pass model bytes (Buffer/Uint8Array), a file path, or a '
      + 'graphengine.v1.GraphDef object');
  }

  /**
   * Send a model; resolves with its graph id. `model`: ONNX / frozen TensorFlow / offline
   * model / binary GraphDef bytes, a path to such a file, or a GraphDef as a plain object
   * (fields of graphengine.v1.GraphDef, camelCase). options: name, gears (batch sizes).
   */
  async addGraph(model, { name = '', gears = [] } = {}) {
    gears.forEach((g) => checkCount('gear', g, { min: 1 }));
    const response = await this._call('AddGraph', { ...this._modelField(model), name, gears });
    return response.graphId;
  }

  /** Stages 1-5; resolves with the compile report. options: inputShapes {name: dims}. */
  async compileGraph(graphId, { inputShapes } = {}) {
    const response = await this._call('CompileGraph',
      { graphId, inputShapes: inputShapesToWire(inputShapes) });
    return reportFromWire(response.report);
  }

  /**
   * Run a graph (compiled first if it is not). `inputs`: {name: typed array or {data, shape,
   * dtype}}. Resolves with {name: {dtype, shape, data}}, in graph order or that of
   * `outputNames`.
   */
  async runGraph(graphId, inputs, { outputNames = [], timeoutMs } = {}) {
    const request = { graphId, inputs: tensors.toWireTensors(inputs), outputNames };
    const response = await this._call('RunGraph', request, timeoutMs);
    return tensors.fromWireTensors(response.outputs);
  }

  async graphInfo(graphId) {
    return graphInfoFromWire((await this._call('GetGraphInfo', { graphId })).info);
  }

  async removeGraph(graphId) {
    await this._call('RemoveGraph', { graphId });
  }

  /** The compiled graph as offline model bytes (every gear, or `inputShapes`). */
  async exportModel(graphId, { inputShapes } = {}) {
    const response = await this._call('ExportModel',
      { graphId, inputShapes: inputShapesToWire(inputShapes) });
    return response.offlineModel;
  }

  /** Add an offline model (bytes or a file path); resolves with its graph id. */
  async importModel(data, { name = '' } = {}) {
    const offlineModel = this._modelBytes(data);
    if (offlineModel === null) throw new TypeError('importModel: pass offline model bytes or a file path');
    return (await this._call('ImportModel', { offlineModel, name })).graphId;
  }

  /** Close the session on the server; closing twice does nothing. */
  async close() {
    if (this.closed) return;
    await this._call('CloseSession', {});
    this.closed = true;
  }
}

module.exports = { Client, Session, DEFAULT_MAX_MESSAGE_BYTES };
