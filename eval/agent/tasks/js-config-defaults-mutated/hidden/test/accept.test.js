import test from 'node:test';
import assert from 'node:assert/strict';
import { defaults, loadConfig } from '../config.js';

test('accept: loadConfig leaves the defaults alone', () => {
  const staging = loadConfig({ server: { port: 9000 }, log: { level: 'debug' } });
  assert.equal(staging.server.port, 9000);
  const plain = loadConfig();
  assert.equal(plain.server.port, 8080);
  assert.equal(plain.log.level, 'info');
  assert.deepEqual(defaults, {
    server: { host: 'localhost', port: 8080 },
    log: { level: 'info', format: 'text' },
  });
});

test('accept: configs do not share nested objects', () => {
  const a = loadConfig();
  a.server.port = 1;
  a.log.level = 'error';
  const b = loadConfig();
  assert.equal(b.server.port, 8080);
  assert.equal(b.log.level, 'info');
  const overrides = { server: { port: 7000 } };
  const c = loadConfig(overrides);
  c.server.port = 2;
  assert.equal(overrides.server.port, 7000);
});
