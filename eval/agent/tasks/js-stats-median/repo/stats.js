// Summary statistics for the metrics dashboard.

function requireValues(values) {
  if (!Array.isArray(values) || values.length === 0) {
    throw new RangeError('need at least one value');
  }
}

export function sum(values) {
  return values.reduce((acc, v) => acc + v, 0);
}

export function mean(values) {
  requireValues(values);
  return sum(values) / values.length;
}

export function max(values) {
  requireValues(values);
  return Math.max(...values);
}
