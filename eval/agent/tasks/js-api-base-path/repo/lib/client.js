'use strict';

// ApiClient builds request URLs for our REST API and fetches them.
class ApiClient {
  constructor(baseUrl, { fetchImpl = globalThis.fetch } = {}) {
    this.baseUrl = baseUrl;
    this.fetchImpl = fetchImpl;
  }

  // url returns the absolute URL of path under the base URL, with params
  // (an object) as the query string.
  url(path, params = {}) {
    const u = new URL(path, this.baseUrl);
    for (const [key, value] of Object.entries(params)) {
      if (value !== undefined) u.searchParams.set(key, String(value));
    }
    return u.toString();
  }

  async getJSON(path, params) {
    const res = await this.fetchImpl(this.url(path, params));
    if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status}`);
    return res.json();
  }
}

module.exports = { ApiClient };
