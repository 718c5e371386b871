'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { ApiClient } = require('../lib/client');

test('url on a host root', () => {
  const c = new ApiClient('https://api.example.com');
  assert.equal(c.url('users'), 'https://api.example.com/users');
  assert.equal(c.url('/users', { page: 2, q: undefined }), 'https://api.example.com/users?page=2');
});

test('getJSON', async () => {
  const seen = [];
  const fetchImpl = async (url) => {
    seen.push(url);
    return { ok: true, status: 200, json: async () => ({ id: 7 }) };
  };
  const c = new ApiClient('https://api.example.com', { fetchImpl });
  assert.deepEqual(await c.getJSON('users/7'), { id: 7 });
  assert.deepEqual(seen, ['https://api.example.com/users/7']);
});
