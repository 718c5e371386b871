import test from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs } from '../src/args.js';

test('options with values and flags', () => {
  assert.deepEqual(parseArgs(['--port', '8080', '--verbose']), { _: [], port: '8080', verbose: true });
});

test('positional arguments and --', () => {
  assert.deepEqual(parseArgs(['build', '--out', 'dist', '--', '--not-an-option']), {
    _: ['build', '--not-an-option'],
    out: 'dist',
  });
});
