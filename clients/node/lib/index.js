'use strict';
// @graphengine/client: the Node.js client of a GraphEngine server.
const { Client, Session, DEFAULT_MAX_MESSAGE_BYTES } = require('./client');
const errors = require('./errors');
const { DTYPES } = require('./tensors');

module.exports = {
  Client, Session, DEFAULT_MAX_MESSAGE_BYTES, DTYPES: Object.keys(DTYPES), ...errors,
};
