'use strict';
// The client against a real GraphEngine server. tests/integration/test_node_client.py starts
// one (TLS, a bearer token, a model repository), writes the models and their expected
// outputs (computed with numpy) to a JSON file, and runs this file with:
//   GRAPHENGINE_ADDRESS  host:port
//   GRAPHENGINE_TOKEN    the bearer token
//   GRAPHENGINE_CA       the server's certificate (PEM), as the root to trust
//   GRAPHENGINE_CASES    the JSON file
// Without GRAPHENGINE_ADDRESS every test here is skipped, saying why.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const ge = require('..');

const ADDRESS = process.env.GRAPHENGINE_ADDRESS;
const skip = ADDRESS ? false
  : 'no server: set GRAPHENGINE_ADDRESS (tests/integration/test_node_client.py starts one)';
const TIMEOUT_MS = 60000;

let client;
let cases;
function connect(extra = {}) {
  // The test certificate names localhost (TLS server names are not IP addresses).
  return new ge.Client(ADDRESS, {
    timeoutMs: TIMEOUT_MS, rootCertificates: process.env.GRAPHENGINE_CA, serverName: 'localhost', ...extra,
  });
}

before(() => {
  if (skip) return;
  cases = JSON.parse(fs.readFileSync(process.env.GRAPHENGINE_CASES, 'utf8'));
  client = connect({ token: process.env.GRAPHENGINE_TOKEN });
});
after(() => client?.close());

function assertClose(actual, expected, what, { rtol = 1e-5, atol = 1e-6 } = {}) {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i += 1) {
    const tolerance = atol + rtol * Math.abs(expected[i]);
    assert.ok(Math.abs(actual[i] - expected[i]) <= tolerance,
      `${what}[${i}]: ${actual[i]} is not ${expected[i]} within ${tolerance}`);
  }
}

/** The tiny model's inputs: x float32 [2, 4], k int64 [3], from the JSON cases. */
function tinyInputs() {
  return {
    x: { data: Float32Array.from(cases.x), shape: cases.x_shape },
    k: BigInt64Array.from(cases.k.map(BigInt)),
  };
}

function assertTinyOutputs(outputs) {
  assert.deepEqual(Object.keys(outputs), ['y', 'k2']);
  assert.equal(outputs.y.dtype, 'float32');
  assert.deepEqual(outputs.y.shape, cases.y_shape);
  assert.ok(outputs.y.data instanceof Float32Array);
  assertClose(outputs.y.data, cases.y, 'y');
  assert.equal(outputs.k2.dtype, 'int64');
  assert.ok(outputs.k2.data instanceof BigInt64Array);
  assert.deepEqual([...outputs.k2.data], cases.k2.map(BigInt));
}

/** Asserts `promise` rejects with `cls`; returns the error for further checks. */
async function rejection(promise, cls) {
  let caught = null;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof cls, `expected a ${cls.name}, got ${caught && caught.stack}`);
  assert.ok(caught instanceof ge.GraphEngineError);
  return caught;
}

test('session lifecycle: create, list, close twice, then NOT_FOUND', { skip }, async () => {
  await client.waitForReady(TIMEOUT_MS);
  const session = await client.createSession({ maxStreams: 2, options: { fold_constants: 'true' } });
  assert.match(session.id, /\S/);
  const listed = (await client.listSessions()).find((s) => s.sessionId === session.id);
  assert.ok(listed, 'the new session is listed');
  assert.equal(listed.options.maxStreams, 2);
  assert.deepEqual(listed.graphIds, []);
  await session.close();
  await session.close(); // a second close does nothing
  assert.equal((await client.listSessions()).some((s) => s.sessionId === session.id), false);
  const err = await rejection(session.graphInfo(1), ge.NotFoundError);
  assert.match(err.message, new RegExp(session.id));
});

test('ONNX graph from a path: add, compile, run with Float32Array and BigInt64Array', { skip }, async () => {
  const session = await client.createSession();
  try {
    const graphId = await session.addGraph(cases.tiny_model);
    const info = await session.graphInfo(graphId);
    assert.equal(info.name, 'tiny');
    assert.equal(info.compiled, false);
    assert.deepEqual(info.inputs.map((t) => [t.name, t.dtype, t.shape]),
      [['x', 'float32', ['batch', 4]], ['k', 'int64', [3]]]);

    const report = await session.compileGraph(graphId, { inputShapes: { x: cases.x_shape } });
    assert.equal(report.graph, 'tiny');
    assert.ok(report.passes.length > 0 && report.nodesBefore > 0);
    assert.ok(report.memory.arenaBytes > 0);
    assert.equal((await session.graphInfo(graphId)).compiled, true);

    assertTinyOutputs(await session.runGraph(graphId, tinyInputs()));
    const only = await session.runGraph(graphId, tinyInputs(), { outputNames: ['k2'] });
    assert.deepEqual(Object.keys(only), ['k2']);

    await session.removeGraph(graphId);
    await rejection(session.graphInfo(graphId), ge.NotFoundError);
  } finally {
    await session.close();
  }
});

test('offline model: export from bytes, import, run', { skip }, async () => {
  const session = await client.createSession();
  try {
    const graphId = await session.addGraph(fs.readFileSync(cases.tiny_model), { name: 'tiny_bytes' });
    const offline = await session.exportModel(graphId, { inputShapes: { x: cases.x_shape } });
    assert.ok(Buffer.isBuffer(offline) && offline.length > 0);
    const imported = await session.importModel(offline, { name: 'tiny_offline' });
    assert.notEqual(imported, graphId);
    assert.equal((await session.graphInfo(imported)).name, 'tiny_offline');
    assertTinyOutputs(await session.runGraph(imported, tinyInputs()));
  } finally {
    await session.close();
  }
});

test('a GraphDef written as a plain object, with gears', { skip }, async () => {
  // sum = a + b over float32[batch, 3]; batch sizes 1 and 2 compiled ahead.
  const desc = (name) => ({ name, dtype: 'DT_FLOAT32', shape: [{ symbol: 'batch' }, { size: 3 }] });
  const graph = {
    name: 'js_add',
    inputs: [desc('a'), desc('b')],
    outputs: [desc('sum')],
    nodes: [{ name: 'add', opType: 'Add', inputs: ['a', 'b'], outputs: ['sum'] }],
  };
  const session = await client.createSession();
  try {
    const graphId = await session.addGraph(graph, { gears: [1, 2] });
    const info = await session.graphInfo(graphId);
    assert.deepEqual([info.name, info.gears, info.inputs[0].shape], ['js_add', [1, 2], ['batch', 3]]);
    const a = { data: new Float32Array([1.5, -2, 3, 0, 1, 2]), shape: [2, 3] };
    const b = { data: new Float32Array([0.25, 4, -3, 1, 1, 1]), shape: [2, 3] };
    const { sum } = await session.runGraph(graphId, { a, b });
    assert.deepEqual(sum.shape, [2, 3]);
    assert.deepEqual([...sum.data], [1.75, 2, 0, 1, 2, 3]);
  } finally {
    await session.close();
  }
});

test('KServe v2: live, ready, metadata and infer on a repository model', { skip }, async () => {
  const model = cases.repository_model;
  assert.equal(await client.serverLive(), true);
  assert.equal(await client.serverReady(), true);
  const server = await client.serverMetadata();
  assert.equal(server.name, 'graphengine');
  assert.ok(server.version.length > 0 && Array.isArray(server.extensions));
  assert.equal(await client.modelReady(model), true);
  const meta = await client.modelMetadata(model);
  assert.equal(meta.name, model);
  assert.deepEqual(meta.versions, ['1']);
  assert.deepEqual(meta.inputs, [{ name: 'x', datatype: 'FP32', shape: [-1, 4] },
    { name: 'k', datatype: 'INT64', shape: [3] }]);

  const result = await client.infer(model, tinyInputs(), { id: 'req-1' });
  assert.equal(result.modelName, model);
  assert.equal(result.id, 'req-1');
  assertTinyOutputs(result.outputs);
  const one = await client.infer(model, tinyInputs(), { version: '1', outputs: ['y'] });
  assert.deepEqual(Object.keys(one.outputs), ['y']);
  assertClose(one.outputs.y.data, cases.y, 'y');

  const err = await rejection(client.infer('no-such-model', tinyInputs()), ge.NotFoundError);
  assert.match(err.message, /no-such-model/);
});

test('NOT_FOUND for an unknown session, with the status details', { skip }, async () => {
  const err = await rejection(client.attach('no-such-session').runGraph(1, tinyInputs()),
    ge.NotFoundError);
  assert.equal(err.code, 'NOT_FOUND');
  assert.equal(err.grpcCode, 5);
  assert.equal(err.name, 'NotFoundError');
  assert.match(err.message, /no-such-session/);
  assert.equal(typeof err.errorType, 'string'); // from the google.rpc.ErrorInfo
  assert.match(err.stack, /client\.test\.js/); // the caller's frames, not gRPC's
});

test('INVALID_ARGUMENT naming the tensor for a wrong input shape', { skip }, async () => {
  const session = await client.createSession();
  try {
    const graphId = await session.addGraph(cases.tiny_model);
    const inputs = { ...tinyInputs(), x: { data: new Float32Array(10), shape: [2, 5] } };
    const err = await rejection(session.runGraph(graphId, inputs), ge.InvalidArgumentError);
    assert.equal(err.code, 'INVALID_ARGUMENT');
    assert.equal(err.errorType, 'InvalidInput');
    assert.equal(err.tensor, 'x');
    assert.equal(err.graph, 'tiny');
    assert.match(err.message, /input 'x'.*\[2, 5\]/);
  } finally {
    await session.close();
  }
});

test('INVALID_ARGUMENT for malformed graphs, naming the node', { skip }, async () => {
  const session = await client.createSession();
  try {
    const bytes = await rejection(session.addGraph(Buffer.from('not a model')), ge.InvalidArgumentError);
    assert.equal(bytes.errorType, 'InvalidModel');
    assert.match(bytes.message, /not an ONNX model/);

    const bad = await rejection((async () => {
      const graphId = await session.addGraph(cases.bad_node_model);
      await session.compileGraph(graphId);
    })(), ge.InvalidArgumentError);
    assert.equal(bad.errorType, 'InvalidGraph');
    assert.equal(bad.node, cases.bad_node);
    assert.equal(bad.graph, 'broken');
    assert.match(bad.message, new RegExp(`node '${cases.bad_node}'`));
  } finally {
    await session.close();
  }
});

test('UNAUTHENTICATED without a valid token, UNAVAILABLE in plaintext to a TLS port', { skip }, async () => {
  const nobody = connect();
  const wrong = connect({ token: 'not-the-token-0000' });
  const plaintext = new ge.Client(ADDRESS, { timeoutMs: TIMEOUT_MS });
  try {
    const missing = await rejection(nobody.createSession(), ge.UnauthenticatedError);
    assert.match(missing.message, /missing/);
    const invalid = await rejection(wrong.infer(cases.repository_model, tinyInputs()),
      ge.UnauthenticatedError);
    assert.match(invalid.message, /not valid/);
    await rejection(plaintext.serverLive(), ge.UnavailableError);
  } finally {
    nobody.close();
    wrong.close();
    plaintext.close();
  }
});
