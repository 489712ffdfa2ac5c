'use strict';
// The .proto contracts, loaded at run time: the services through @grpc/proto-loader, the
// google.rpc error details through protobufjs (proto-loader only describes messages; it does
// not decode one that no method returns).
//
// The graphengine protos are the repository's `proto/` folder. A packed package carries a
// copy in its own `proto/` (the prepack script writes it); a checkout of the repository
// reads `../../proto`, so the client never drifts from the server it is tested against.

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PACKAGE_DIR = path.resolve(__dirname, '..');
const SERVICE_FILES = ['graphengine/v1/session.proto', 'graphengine/kserve/v2/grpc_service.proto'];

// camelCase fields, enums by name, int64 as decimal strings (converted, with bounds, where
// they are read), bytes as Buffers, unset scalars present with their defaults.
const LOADER_OPTIONS = {
  keepCase: false, longs: String, enums: String, bytes: Buffer, defaults: true, oneofs: true,
};

/** The folder holding graphengine/v1/session.proto: `dir` if given, else the package's own
 * copy, else the repository's proto/ two levels up. */
function protoDir(dir) {
  const candidates = dir ? [path.resolve(dir)]
    : [path.join(PACKAGE_DIR, 'proto'), path.join(PACKAGE_DIR, '..', '..', 'proto')];
  for (const candidate of candidates) {
    if (fs.existsSync(path.join(candidate, SERVICE_FILES[0]))) return candidate;
  }
  throw new Error(`GraphEngine .proto files not found: no ${SERVICE_FILES[0]} under `
    + candidates.join(' or '));
}

const loaded = new Map();

/** The service constructors {GraphEngine, GRPCInferenceService}, loaded once per folder. */
function services(dir) {
  const root = protoDir(dir);
  if (!loaded.has(root)) {
    const definition = protoLoader.loadSync(SERVICE_FILES, { ...LOADER_OPTIONS, includeDirs: [root] });
    const objects = grpc.loadPackageDefinition(definition);
    loaded.set(root, {
      GraphEngine: objects.graphengine.v1.GraphEngine,
      GRPCInferenceService: objects.inference.GRPCInferenceService,
    });
  }
  return loaded.get(root);
}

let rpcTypes = null;

/** google.rpc.Status and google.rpc.ErrorInfo as protobufjs types (from proto/google/rpc;
 * google/protobuf/any.proto is one of protobufjs's bundled definitions). */
function statusTypes() {
  if (rpcTypes === null) {
    const rpcDir = path.join(PACKAGE_DIR, 'proto', 'google', 'rpc');
    const root = protobuf.loadSync([path.join(rpcDir, 'status.proto'),
      path.join(rpcDir, 'error_details.proto')]);
    rpcTypes = {
      Status: root.lookupType('google.rpc.Status'),
      ErrorInfo: root.lookupType('google.rpc.ErrorInfo'),
    };
  }
  return rpcTypes;
}

module.exports = { protoDir, services, statusTypes, SERVICE_FILES };
