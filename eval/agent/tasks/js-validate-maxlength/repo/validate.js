'use strict';

// validate checks data against schema, an object of field => rules, and
// returns the error messages (none when data is valid). Rules:
//   required: true      the field must be present and not ''
//   type: 'string' | 'number'
//   minLength: n        a string field has at least n characters
function validate(schema, data) {
  const errors = [];
  for (const [field, rules] of Object.entries(schema)) {
    const value = data[field];
    if (value === undefined || value === null || value === '') {
      if (rules.required) errors.push(`${field} is required`);
      continue;
    }
    if (rules.type && typeof value !== rules.type) {
      errors.push(`${field} must be a ${rules.type}`);
      continue;
    }
    if (rules.minLength !== undefined && typeof value === 'string' && value.length < rules.minLength) {
      errors.push(`${field} must be at least ${rules.minLength} characters`);
    }
  }
  return errors;
}

module.exports = { validate };
