'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { topScores, rank } = require('../src/leaderboard');

test('accept: multi-digit scores order numerically', () => {
  assert.deepEqual(topScores([9, 100, 10, 25], 3), [100, 25, 10]);
  assert.deepEqual(topScores([1000, 999, 5]), [1000, 999, 5]);
});

test('accept: rank with multi-digit scores', () => {
  const ranked = rank([{ name: 'a', score: 9 }, { name: 'b', score: 120 }, { name: 'c', score: 15 }]);
  assert.deepEqual(ranked.map((p) => [p.name, p.place]), [['b', 1], ['c', 2], ['a', 3]]);
});
