'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { ApiClient } = require('../lib/client');

test('accept: the base path is kept', () => {
  for (const base of ['https://api.example.com/v1', 'https://api.example.com/v1/']) {
    const c = new ApiClient(base);
    assert.equal(c.url('users'), 'https://api.example.com/v1/users', base);
    assert.equal(c.url('/users'), 'https://api.example.com/v1/users', base);
    assert.equal(c.url('users/7/orders', { limit: 5 }), 'https://api.example.com/v1/users/7/orders?limit=5', base);
  }
});

test('accept: deeper base paths and host roots', () => {
  assert.equal(new ApiClient('http://localhost:8080/api/v2').url('/health'), 'http://localhost:8080/api/v2/health');
  assert.equal(new ApiClient('https://api.example.com/').url('/users'), 'https://api.example.com/users');
});
