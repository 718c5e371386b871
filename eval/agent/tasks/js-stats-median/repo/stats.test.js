import test from 'node:test';
import assert from 'node:assert/strict';
import { max, mean, sum } from './stats.js';

test('sum', () => {
  assert.equal(sum([]), 0);
  assert.equal(sum([1, 2, 3.5]), 6.5);
});

test('mean and max', () => {
  assert.equal(mean([2, 4, 9]), 5);
  assert.equal(max([2, 4, 9]), 9);
  assert.throws(() => mean([]), RangeError);
});
