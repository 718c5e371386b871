import test from 'node:test';
import assert from 'node:assert/strict';
import { median } from '../stats.js';

test('accept: median', () => {
  assert.equal(median([7]), 7);
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([10, 2, 4, 8]), 6);
  assert.equal(median([100, 5, 20, 3, 1000]), 20);
  assert.equal(median([-1, -3]), -2);
});

test('accept: median leaves its input alone and rejects empty input', () => {
  const values = [5, 1, 3];
  median(values);
  assert.deepEqual(values, [5, 1, 3]);
  assert.throws(() => median([]), RangeError);
});
