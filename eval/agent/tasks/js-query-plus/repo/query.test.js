'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { parseQuery } = require('./query');

test('parses pairs', () => {
  assert.deepEqual(parseQuery('?a=1&b=two'), { a: '1', b: 'two' });
});

test('repeated keys become arrays', () => {
  assert.deepEqual(parseQuery('tag=x&tag=y&tag=z'), { tag: ['x', 'y', 'z'] });
});

test('decodes percent escapes', () => {
  assert.deepEqual(parseQuery('name=Jos%C3%A9&empty=&flag'), { name: 'José', empty: '', flag: '' });
});
