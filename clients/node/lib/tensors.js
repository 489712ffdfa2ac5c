'use strict';
// Typed arrays <-> tensors on the wire: graphengine.v1.Tensor (dtype enum, shape, raw bytes)
// and KServe v2 tensors (datatype name, shape, raw_*_contents or typed contents). Both carry
// little-endian row-major bytes, which is a typed array's memory on a little-endian host.
//
// A tensor here is {dtype, shape, data}: `dtype` a name ("float32", "int64", ...), `shape` an
// array of non-negative integers, `data` the typed array of its elements. Every size is
// checked against the bytes present before anything is allocated.

const os = require('node:os');

// name: [typed array, graphengine.v1.DataType, KServe datatype]. float16 and bfloat16
// travel as their raw 16-bit patterns (Uint16Array), bool as one byte per element (0 or 1).
const DTYPES = {
  float32: [Float32Array, 'DT_FLOAT32', 'FP32'],
  float64: [Float64Array, 'DT_FLOAT64', 'FP64'],
  float16: [Uint16Array, 'DT_FLOAT16', 'FP16'],
  bfloat16: [Uint16Array, 'DT_BFLOAT16', 'BF16'],
  int8: [Int8Array, 'DT_INT8', 'INT8'],
  int16: [Int16Array, 'DT_INT16', 'INT16'],
  int32: [Int32Array, 'DT_INT32', 'INT32'],
  int64: [BigInt64Array, 'DT_INT64', 'INT64'],
  uint8: [Uint8Array, 'DT_UINT8', 'UINT8'],
  uint16: [Uint16Array, 'DT_UINT16', 'UINT16'],
  uint32: [Uint32Array, 'DT_UINT32', 'UINT32'],
  uint64: [BigUint64Array, 'DT_UINT64', 'UINT64'],
  bool: [Uint8Array, 'DT_BOOL', 'BOOL'],
};
const BY_WIRE = new Map(Object.entries(DTYPES).map(([name, [, wire]]) => [wire, name]));
const BY_KSERVE = new Map(Object.entries(DTYPES).map(([name, [, , kserve]]) => [kserve, name]));
// Dtypes that share their typed array with another and so must be named by the caller.
const NAMED_ONLY = new Set(['float16', 'bfloat16', 'bool']);
// The dtype a typed array means when the caller names none (Uint16Array: uint16).
const BY_ARRAY = new Map(Object.entries(DTYPES).filter(([name]) => !NAMED_ONLY.has(name))
  .map(([name, [array]]) => [array, name]));
if (typeof globalThis.Float16Array === 'function') BY_ARRAY.set(globalThis.Float16Array, 'float16');

// Deeper than any model's tensor; a longer shape is a mistake, not a tensor.
const MAX_RANK = 64;

function checkHost() {
  if (os.endianness() !== 'LE') {
    throw new Error('@graphengine/client needs a little-endian host: tensors travel as '
      + 'little-endian bytes and are read as typed arrays in place');
  }
}

/** Elements of `shape`, checked: `what` names the tensor in errors; `present` is the number
 * of elements the data holds (the product must equal it). */
function checkedCount(what, shape, present) {
  if (!Array.isArray(shape)) throw new TypeError(`${what}: shape must be an array of integers`);
  if (shape.length > MAX_RANK) {
    throw new RangeError(`${what}: shape has ${shape.length} dimensions; at most ${MAX_RANK}`);
  }
  let count = 1;
  let exact = true;
  for (const dim of shape) {
    if (!Number.isSafeInteger(dim) || dim < 0) {
      throw new RangeError(`${what}: shape [${shape.join(', ')}] has ${String(dim)}; `
        + 'dimensions are non-negative integers');
    }
    // Once past `present` the product can only be wrong (or 0); not multiplying further
    // keeps it a safe integer.
    if (count > present) exact = false;
    else count *= dim;
  }
  if (shape.includes(0)) count = 0;
  if (count !== present) {
    const needs = (exact && Number.isSafeInteger(count)) || count === 0 ? `${count}` : `more than ${present}`;
    throw new RangeError(`${what}: shape [${shape.join(', ')}] needs ${needs} elements; `
      + `the data has ${present}`);
  }
  return count;
}

/** A caller's input value (a typed array, or {data, shape?, dtype?}) as a checked tensor. */
function normalize(name, value) {
  const spec = ArrayBuffer.isView(value) ? { data: value } : value;
  if (spec === null || typeof spec !== 'object' || !ArrayBuffer.isView(spec.data)
      || spec.data instanceof DataView) {
    throw new TypeError(`input '${name}': pass a typed array or {data: TypedArray, shape, dtype}`);
  }
  const { data } = spec;
  const dtype = spec.dtype ?? BY_ARRAY.get(data.constructor);
  if (dtype === undefined) {
    throw new TypeError(`input '${name}': a ${data.constructor.name} has no dtype; name one `
      + `(${Object.keys(DTYPES).join(', ')}) with a matching typed array`);
  }
  const entry = DTYPES[dtype];
  if (entry === undefined) {
    throw new TypeError(`input '${name}': unknown dtype '${dtype}'; one of `
      + Object.keys(DTYPES).join(', '));
  }
  const wanted = globalThis.Float16Array && dtype === 'float16'
    && data instanceof globalThis.Float16Array ? globalThis.Float16Array : entry[0];
  if (!(data instanceof wanted)) {
    throw new TypeError(`input '${name}': ${dtype} data must be a ${entry[0].name}, `
      + `not a ${data.constructor.name}`);
  }
  const shape = spec.shape ?? [data.length];
  checkedCount(`input '${name}'`, shape, data.length);
  if (dtype === 'bool' && data.some((b) => b > 1)) {
    throw new RangeError(`input '${name}': bool data must hold 0 or 1 only`);
  }
  return { dtype, shape: shape.slice(), data };
}

function bytesOf(data) {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** graphengine.v1.Tensor messages (as proto-loader objects) for {name: value}. */
function toWireTensors(inputs) {
  checkHost();
  if (inputs === null || typeof inputs !== 'object') {
    throw new TypeError('inputs must be an object of {name: typed array or tensor}');
  }
  return Object.entries(inputs).map(([name, value]) => {
    const t = normalize(name, value);
    return { name, dtype: DTYPES[t.dtype][1], shape: t.shape, data: bytesOf(t.data) };
  });
}

/** Parse int64 dims (decimal strings from proto-loader, or numbers) as safe integers. */
function dimsOf(what, dims) {
  return dims.map((d) => {
    const n = Number(d);
    if (!Number.isSafeInteger(n)) throw new RangeError(`${what}: dimension ${d} out of range`);
    return n;
  });
}

/** A tensor from raw little-endian bytes, copied into a fresh (aligned) typed array. */
function fromBytes(what, dtype, shape, bytes) {
  checkHost();
  const Ctor = DTYPES[dtype][0];
  const size = Ctor.BYTES_PER_ELEMENT;
  if (bytes.length % size !== 0) {
    throw new RangeError(`${what}: ${bytes.length} bytes are not whole ${dtype} elements`);
  }
  const count = checkedCount(what, shape, bytes.length / size);
  const data = new Ctor(count);
  new Uint8Array(data.buffer).set(bytes);
  return { dtype, shape, data };
}

/** {name: tensor} from graphengine.v1.Tensor messages, in the order they came. */
function fromWireTensors(tensors) {
  const out = {};
  for (const t of tensors) {
    const what = `output '${t.name}'`;
    const dtype = BY_WIRE.get(t.dtype);
    if (dtype === undefined) throw new TypeError(`${what}: dtype ${t.dtype} cannot be a typed array`);
    out[t.name] = fromBytes(what, dtype, dimsOf(what, t.shape), t.data);
  }
  return out;
}

/** The KServe request's `inputs` and `rawInputContents` for {name: value}. */
function toKServeInputs(inputs) {
  const wire = toWireTensors(inputs);
  return {
    inputs: wire.map((t) => ({ name: t.name, datatype: DTYPES[BY_WIRE.get(t.dtype)][2], shape: t.shape })),
    rawInputContents: wire.map((t) => t.data),
  };
}

// KServe typed contents field per datatype (FP16, BF16 travel raw only).
const CONTENTS_FIELD = {
  bool: 'boolContents', int8: 'intContents', int16: 'intContents', int32: 'intContents',
  int64: 'int64Contents', uint8: 'uintContents', uint16: 'uintContents', uint32: 'uintContents',
  uint64: 'uint64Contents', float32: 'fp32Contents', float64: 'fp64Contents',
};

function fromContents(what, dtype, shape, contents) {
  const field = CONTENTS_FIELD[dtype];
  const values = field && contents ? contents[field] : undefined;
  if (values === undefined) throw new TypeError(`${what}: no raw or typed contents for ${dtype}`);
  const count = checkedCount(what, shape, values.length);
  const Ctor = DTYPES[dtype][0];
  const data = new Ctor(count);
  const big = Ctor === BigInt64Array || Ctor === BigUint64Array;
  for (let i = 0; i < count; i += 1) {
    data[i] = big ? BigInt(values[i]) : Number(values[i]);
  }
  return { dtype, shape, data };
}

/** {name: tensor} from a ModelInferResponse (raw contents, or typed contents). */
function fromKServeOutputs(response) {
  const raw = response.rawOutputContents ?? [];
  if (raw.length && raw.length !== response.outputs.length) {
    throw new RangeError(`response has ${raw.length} raw_output_contents for `
      + `${response.outputs.length} outputs`);
  }
  const out = {};
  response.outputs.forEach((t, i) => {
    const what = `output '${t.name}'`;
    const dtype = BY_KSERVE.get(t.datatype);
    if (dtype === undefined) throw new TypeError(`${what}: datatype ${t.datatype} cannot be a typed array`);
    const shape = dimsOf(what, t.shape);
    out[t.name] = raw.length ? fromBytes(what, dtype, shape, raw[i])
      : fromContents(what, dtype, shape, t.contents);
  });
  return out;
}

module.exports = {
  DTYPES, MAX_RANK, normalize, toWireTensors, fromWireTensors, toKServeInputs,
  fromKServeOutputs, dimsOf, checkedCount,
};
