import test from 'node:test';
import assert from 'node:assert/strict';
import { deepMerge, loadConfig } from '../config.js';

test('deepMerge merges nested objects', () => {
  const merged = deepMerge({ a: { x: 1, y: 2 }, b: 1 }, { a: { y: 3 }, c: [1] });
  assert.deepEqual(merged, { a: { x: 1, y: 3 }, b: 1, c: [1] });
});

test('loadConfig applies overrides', () => {
  const cfg = loadConfig({ log: { level: 'debug' } });
  assert.equal(cfg.log.level, 'debug');
  assert.equal(cfg.log.format, 'text');
  assert.equal(cfg.server.host, 'localhost');
});
