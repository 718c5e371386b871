'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { topScores, rank } = require('../src/leaderboard');

test('topScores', () => {
  assert.deepEqual(topScores([3, 7, 1, 5]), [7, 5, 3]);
  assert.deepEqual(topScores([2, 9], 5), [9, 2]);
});

test('rank', () => {
  const ranked = rank([{ name: 'ann', score: 4 }, { name: 'bob', score: 6 }]);
  assert.deepEqual(ranked, [
    { name: 'bob', score: 6, place: 1 },
    { name: 'ann', score: 4, place: 2 },
  ]);
});

test('does not change its input', () => {
  const scores = [1, 3, 2];
  topScores(scores);
  assert.deepEqual(scores, [1, 3, 2]);
});
