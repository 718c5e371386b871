'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { validate } = require('../validate');

const schema = {
  username: { required: true, type: 'string', minLength: 3, maxLength: 8 },
  bio: { type: 'string', maxLength: 10 },
};

test('accept: maxLength', () => {
  assert.deepEqual(validate(schema, { username: 'kim' }), []);
  assert.deepEqual(validate(schema, { username: 'abcdefgh' }), []);
  assert.deepEqual(validate(schema, { username: 'abcdefghi' }), ['username must be at most 8 characters']);
  assert.deepEqual(validate(schema, { username: 'kim', bio: 'x'.repeat(11) }), ['bio must be at most 10 characters']);
});

test('accept: maxLength with other rules', () => {
  assert.deepEqual(validate(schema, {}), ['username is required']);
  assert.deepEqual(validate(schema, { username: 'ab' }), ['username must be at least 3 characters']);
  assert.deepEqual(validate({ n: { maxLength: 2 } }, { n: 'abc' }), ['n must be at most 2 characters']);
});
