'use strict';
// Status details -> typed errors, without a server (the server's own details are checked in
// client.test.js): what is decoded from the google.rpc.Status, and what is left alone.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const ge = require('..');
const { statusTypes } = require('../lib/protos');

function details({ domain = 'graphengine', metadata = {}, typeUrl = 'type.googleapis.com/google.rpc.ErrorInfo' } = {}) {
  const { Status, ErrorInfo } = statusTypes();
  const info = ErrorInfo.encode({ reason: 'InvalidGraph', domain, metadata }).finish();
  return Buffer.from(Status.encode({ code: 3, message: 'm', details: [{ type_url: typeUrl, value: info }] }).finish());
}

function serviceError(code, trailer) {
  const metadata = new grpc.Metadata();
  if (trailer !== undefined) metadata.set('grpc-status-details-bin', trailer);
  return { code, details: 'the message', metadata };
}

test('one class per status code, with the code and its number', () => {
  const err = ge.fromServiceError(serviceError(grpc.status.RESOURCE_EXHAUSTED));
  assert.ok(err instanceof ge.ResourceExhaustedError && err instanceof ge.GraphEngineError);
  assert.deepEqual([err.name, err.code, err.grpcCode, err.message], ['ResourceExhaustedError', 'RESOURCE_EXHAUSTED', 8, 'the message']);
  assert.equal(ge.errorClass('DEADLINE_EXCEEDED'), ge.DeadlineExceededError);
  assert.equal(ge.errorClass(99), ge.UnknownError);
  const plain = new Error('not gRPC');
  assert.equal(ge.fromServiceError(plain), plain);
});

test('the ErrorInfo of the graphengine domain gives the kind and the context', () => {
  const err = ge.fromServiceError(serviceError(3, details({ metadata: { node: 'n1', stage: 'validate' } })));
  assert.ok(err instanceof ge.InvalidArgumentError);
  assert.deepEqual([err.errorType, err.node, err.stage, err.graph, err.tensor], ['InvalidGraph', 'n1', 'validate', null, null]);
});

test('details of another domain, another type or not a Status leave the context empty', () => {
  for (const trailer of [details({ domain: 'example.com' }),
    details({ typeUrl: 'type.googleapis.com/google.rpc.DebugInfo' }),
    Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f])]) {
    const err = ge.fromServiceError(serviceError(3, trailer));
    assert.ok(err instanceof ge.InvalidArgumentError);
    assert.deepEqual([err.errorType, err.node, err.message], [null, null, 'the message']);
  }
});
