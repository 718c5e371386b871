// parseArgs reads command-line arguments:
//   --name value   sets name to value
//   --flag         sets flag to true (when no value follows)
//   --             ends the options; the rest are positional
// Anything else is positional and collected, in order, in _.
export function parseArgs(argv) {
  const result = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') {
      result._.push(...argv.slice(i + 1));
      break;
    }
    if (arg.startsWith('--')) {
      const key = arg.slice(2);
      const next = argv[i + 1];
      if (next !== undefined && !next.startsWith('--')) {
        result[key] = next;
        i++;
      } else {
        result[key] = true;
      }
      continue;
    }
    result._.push(arg);
  }
  return result;
}
