import test from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs } from '../src/args.js';

test('accept: --key=value', () => {
  assert.deepEqual(parseArgs(['--port=8080', '--verbose']), { _: [], port: '8080', verbose: true });
  assert.deepEqual(parseArgs(['--filter=a=b']), { _: [], filter: 'a=b' });
  assert.deepEqual(parseArgs(['--name=']), { _: [], name: '' });
});

test('accept: --key=value does not take the next argument', () => {
  assert.deepEqual(parseArgs(['--out=dist', 'src/index.js']), { _: ['src/index.js'], out: 'dist' });
  assert.deepEqual(parseArgs(['--mode=fast', '--out', 'x']), { _: [], mode: 'fast', out: 'x' });
});
