'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { parseQuery } = require('../query');

test('accept: plus is a space', () => {
  assert.deepEqual(parseQuery('?q=hello+world'), { q: 'hello world' });
  assert.deepEqual(parseQuery('full+name=Jane+Doe'), { 'full name': 'Jane Doe' });
});

test('accept: an encoded plus stays a plus', () => {
  assert.deepEqual(parseQuery('expr=1%2B1'), { expr: '1+1' });
  assert.deepEqual(parseQuery('q=a+%2B+b&q=c'), { q: ['a + b', 'c'] });
});
