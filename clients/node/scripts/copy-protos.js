'use strict';
// npm pack's prepack / postpack: a packed package carries a copy of the repository's
// graphengine protos in its own proto/ (lib/protos.js looks there first); --clean removes
// the copy afterwards, so a checkout always reads the repository's proto/ itself.

const fs = require('node:fs');
const path = require('node:path');

const PACKAGE_DIR = path.resolve(__dirname, '..');
const SOURCE = path.join(PACKAGE_DIR, '..', '..', 'proto', 'graphengine');
const TARGET = path.join(PACKAGE_DIR, 'proto', 'graphengine');
// The session API and KServe v2 (the TensorFlow GraphDef copy is the server's business).
const FOLDERS = ['v1', path.join('kserve', 'v2')];

fs.rmSync(TARGET, { recursive: true, force: true });
if (process.argv.includes('--clean')) process.exit(0);

if (!fs.existsSync(SOURCE)) {
  console.error(`copy-protos: ${SOURCE} not found; pack from a checkout of the repository`);
  process.exit(1);
}
for (const folder of FOLDERS) {
  const from = path.join(SOURCE, folder);
  fs.mkdirSync(path.join(TARGET, folder), { recursive: true });
  for (const name of fs.readdirSync(from).filter((n) => n.endsWith('.proto'))) {
    fs.copyFileSync(path.join(from, name), path.join(TARGET, folder, name));
  }
}
