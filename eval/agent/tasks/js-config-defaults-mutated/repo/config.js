// Configuration: built-in defaults with per-environment overrides.

export const defaults = {
  server: { host: 'localhost', port: 8080 },
  log: { level: 'info', format: 'text' },
};

function isPlainObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

// deepMerge merges source into target, recursing into nested objects;
// arrays and other values from source replace those of target.
export function deepMerge(target, source) {
  for (const [key, value] of Object.entries(source)) {
    if (isPlainObject(value) && isPlainObject(target[key])) {
      deepMerge(target[key], value);
    } else {
      target[key] = value;
    }
  }
  return target;
}

// loadConfig returns the defaults with overrides applied.
export function loadConfig(overrides = {}) {
  return deepMerge(defaults, overrides);
}
