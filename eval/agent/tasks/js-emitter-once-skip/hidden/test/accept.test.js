import test from 'node:test';
import assert from 'node:assert/strict';
import { Emitter } from '../emitter.js';

test('accept: a listener after a once listener still runs', () => {
  const e = new Emitter();
  const got = [];
  e.once('ready', () => got.push('once'));
  e.on('ready', () => got.push('always'));
  e.on('ready', () => got.push('also'));
  e.emit('ready');
  assert.deepEqual(got, ['once', 'always', 'also']);
  e.emit('ready');
  assert.deepEqual(got, ['once', 'always', 'also', 'always', 'also']);
});

test('accept: a listener removing itself does not skip the next', () => {
  const e = new Emitter();
  const got = [];
  const off = e.on('x', () => {
    got.push(1);
    off();
  });
  e.on('x', () => got.push(2));
  e.emit('x');
  assert.deepEqual(got, [1, 2]);
});
