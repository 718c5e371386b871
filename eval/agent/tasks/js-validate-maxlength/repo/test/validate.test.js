'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { validate } = require('../validate');

const schema = {
  name: { required: true, type: 'string', minLength: 2 },
  age: { type: 'number' },
};

test('valid data', () => {
  assert.deepEqual(validate(schema, { name: 'Kim', age: 36 }), []);
});

test('errors', () => {
  assert.deepEqual(validate(schema, { age: 'old' }), ['name is required', 'age must be a number']);
  assert.deepEqual(validate(schema, { name: 'A' }), ['name must be at least 2 characters']);
});
