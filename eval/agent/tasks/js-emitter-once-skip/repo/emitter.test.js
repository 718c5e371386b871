import test from 'node:test';
import assert from 'node:assert/strict';
import { Emitter } from './emitter.js';

test('on and emit', () => {
  const e = new Emitter();
  const got = [];
  e.on('msg', (x) => got.push(`a:${x}`));
  e.on('msg', (x) => got.push(`b:${x}`));
  assert.equal(e.emit('msg', 1), true);
  assert.deepEqual(got, ['a:1', 'b:1']);
  assert.equal(e.emit('other'), false);
});

test('once fires once', () => {
  const e = new Emitter();
  let n = 0;
  e.once('tick', () => n++);
  e.emit('tick');
  e.emit('tick');
  assert.equal(n, 1);
  assert.equal(e.listenerCount('tick'), 0);
});

test('unsubscribe', () => {
  const e = new Emitter();
  let n = 0;
  const off = e.on('tick', () => n++);
  off();
  e.emit('tick');
  assert.equal(n, 0);
});
