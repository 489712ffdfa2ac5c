'use strict';
// Typed arrays <-> wire tensors, without a server: the checks that refuse a bad tensor
// before it is sent, and the decoding of what comes back.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const t = require('../lib/tensors');

test('a typed array names its dtype; the shape defaults to its length', () => {
  const [x, k] = t.toWireTensors({ x: new Float32Array([1, 2]), k: new BigInt64Array([-1n]) });
  assert.deepEqual([x.name, x.dtype, x.shape, [...x.data]], ['x', 'DT_FLOAT32', [2], [0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]]);
  assert.deepEqual([k.dtype, k.shape, k.data.length], ['DT_INT64', [1], 8]);
  assert.equal(k.data.readBigInt64LE(0), -1n);
});

test('the bytes are the array view, not the whole buffer behind it', () => {
  const backing = new Float32Array([9, 1, 2, 9]);
  const [x] = t.toWireTensors({ x: { data: backing.subarray(1, 3), shape: [1, 2] } });
  assert.deepEqual([...new Float32Array(x.data.buffer.slice(x.data.byteOffset, x.data.byteOffset + 8))], [1, 2]);
});

test('a shape that does not fit the data is refused, naming the input', () => {
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(6), shape: [2, 4] } }),
    { name: 'RangeError', message: /input 'x': shape \[2, 4\] needs 8 elements; the data has 6/ });
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(6), shape: [2 ** 40, 2 ** 40] } }),
    { name: 'RangeError', message: /needs more than 6 elements/ });
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(2), shape: [-2, -1] } }),
    { name: 'RangeError', message: /has -2; dimensions are non-negative integers/ });
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(1), shape: [1.5] } }), RangeError);
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(1), shape: new Array(65).fill(1) } }),
    { message: /65 dimensions; at most 64/ });
  assert.deepEqual(t.toWireTensors({ x: { data: new Float32Array(0), shape: [0, 3] } })[0].shape, [0, 3]);
});

test('a dtype needs its typed array; bool holds 0 or 1', () => {
  assert.throws(() => t.toWireTensors({ x: { data: new Float32Array(2), dtype: 'int64' } }),
    { name: 'TypeError', message: /input 'x': int64 data must be a BigInt64Array/ });
  assert.throws(() => t.toWireTensors({ x: { data: new Uint8Array(2), dtype: 'complex64' } }),
    { message: /unknown dtype 'complex64'/ });
  assert.throws(() => t.toWireTensors({ x: [1, 2] }), { message: /pass a typed array/ });
  assert.throws(() => t.toWireTensors({ b: { data: new Uint8Array([0, 2]), dtype: 'bool' } }),
    { message: /bool data must hold 0 or 1/ });
  const [h] = t.toWireTensors({ h: { data: new Uint16Array([0x3c00]), dtype: 'float16' } });
  assert.equal(h.dtype, 'DT_FLOAT16');
});

test('decoded outputs are aligned copies, checked against their shape', () => {
  // An odd offset: a Float32Array cannot view these bytes in place.
  const bytes = Buffer.alloc(9);
  bytes.writeFloatLE(1.5, 1);
  bytes.writeFloatLE(-2, 5);
  const out = t.fromWireTensors([{ name: 'y', dtype: 'DT_FLOAT32', shape: ['1', '2'], data: bytes.subarray(1) }]);
  assert.deepEqual(out.y.shape, [1, 2]);
  assert.deepEqual([...out.y.data], [1.5, -2]);
  assert.throws(() => t.fromWireTensors([{ name: 'y', dtype: 'DT_FLOAT32', shape: ['3'], data: Buffer.alloc(8) }]),
    { message: /output 'y': shape \[3\] needs 3 elements; the data has 2/ });
  assert.throws(() => t.fromWireTensors([{ name: 'y', dtype: 'DT_FLOAT32', shape: ['9007199254740993'], data: Buffer.alloc(4) }]),
    { message: /out of range/ });
  assert.throws(() => t.fromWireTensors([{ name: 's', dtype: 'DT_STRING', shape: [], data: Buffer.alloc(0) }]),
    { message: /output 's': dtype DT_STRING/ });
});

test('KServe outputs: raw contents or typed contents', () => {
  const raw = Buffer.alloc(16);
  raw.writeBigInt64LE(7n, 0);
  raw.writeBigInt64LE(-8n, 8);
  const fromRaw = t.fromKServeOutputs({ outputs: [{ name: 'k', datatype: 'INT64', shape: ['2'] }], rawOutputContents: [raw] });
  assert.deepEqual([...fromRaw.k.data], [7n, -8n]);
  const typed = t.fromKServeOutputs({
    outputs: [{ name: 'y', datatype: 'FP32', shape: ['2'], contents: { fp32Contents: [0.5, 2] } },
      { name: 'k', datatype: 'INT64', shape: ['1'], contents: { int64Contents: ['9007199254740993'] } }],
    rawOutputContents: [],
  });
  assert.deepEqual([...typed.y.data], [0.5, 2]);
  assert.deepEqual([...typed.k.data], [9007199254740993n]);
  assert.throws(() => t.fromKServeOutputs({ outputs: [{ name: 'y', datatype: 'FP32', shape: ['2'] }], rawOutputContents: [raw, raw] }),
    { message: /2 raw_output_contents for 1 outputs/ });
  const { inputs, rawInputContents } = t.toKServeInputs({ x: { data: new Int32Array([1, 2, 3, 4]), shape: [2, 2] } });
  assert.deepEqual(inputs, [{ name: 'x', datatype: 'INT32', shape: [2, 2] }]);
  assert.equal(rawInputContents[0].length, 16);
});
