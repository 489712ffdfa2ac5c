'use strict';
// What the client refuses before anything is sent: no server is needed (the address below
// is never dialled, since every call fails its checks first).

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client } = require('..');

const client = new Client('127.0.0.1:1', { timeoutMs: 1000, maxMessageBytes: 64 });
const session = client.attach('never-created');
after(() => client.close());

test('client options are checked', () => {
  assert.throws(() => new Client(''), { name: 'TypeError', message: /host:port/ });
  assert.throws(() => new Client('h:1', { timeoutMs: 0 }), { message: /timeoutMs must be an integer >= 1/ });
  assert.throws(() => new Client('h:1', { maxMessageBytes: 1.5 }), { message: /maxMessageBytes/ });
  assert.throws(() => new Client('h:1', { protoDir: os.tmpdir() }), { message: /\.proto files not found/ });
});

test('session options, gears and input shapes are checked', async () => {
  await assert.rejects(client.createSession({ maxStream: 2 }), { name: 'TypeError', message: /unknown session option 'maxStream'/ });
  await assert.rejects(session.addGraph(new Uint8Array(4), { gears: [0] }), { name: 'RangeError', message: /gear must be an integer >= 1/ });
  await assert.rejects(session.compileGraph(1, { inputShapes: { x: [1, -4] } }), { message: /inputShapes\['x'\] dimension/ });
  await assert.rejects(session.compileGraph(1, { inputShapes: { x: 3 } }), { message: /inputShapes\['x'\] must be an array/ });
});

test('models: bytes, a path within the message limit, or a GraphDef object', async () => {
  await assert.rejects(session.addGraph(42), { name: 'TypeError', message: /pass model bytes/ });
  await assert.rejects(session.importModel({ name: 'g' }), { message: /importModel: pass offline model bytes/ });
  const big = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ge-node-')), 'big.onnx');
  fs.writeFileSync(big, Buffer.alloc(65));
  await assert.rejects(session.addGraph(big), { name: 'RangeError', message: /65 bytes is more than the client's message limit \(64 bytes/ });
  await assert.rejects(session.addGraph(big.replace(/onnx$/, 'pbtxt')), { code: 'ENOENT' });
  fs.writeFileSync(big.replace(/onnx$/, 'pbtxt'), 'name: "g"');
  await assert.rejects(session.addGraph(big.replace(/onnx$/, 'pbtxt')), { message: /text GraphDefs are read by the Python client only/ });
});

test('run inputs are checked before the call', async () => {
  await assert.rejects(session.runGraph(1, { x: { data: new Float32Array(3), shape: [2, 2] } }),
    { name: 'RangeError', message: /input 'x': shape \[2, 2\] needs 4 elements; the data has 3/ });
  await assert.rejects(client.infer('m', { x: [1, 2, 3] }), { name: 'TypeError', message: /input 'x': pass a typed array/ });
  await assert.rejects(session.runGraph(1, null), { message: /inputs must be an object/ });
});
