// The gateway's REST API, with the key the user signed in with. The key
// lives in sessionStorage (this tab only, gone when it closes) and travels
// only in the X-API-Key header, never in a URL.
import type { components } from "./api.gen";

export type Schemas = components["schemas"];
export type ApiErrorBody = Schemas["Error"];

const KEY = "sylk.apiKey";

export function apiKey(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, key);
}

// ApiError is a failed call: the gateway's Error form.
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: Partial<ApiErrorBody>,
  ) {
    super(body.message || `HTTP ${status}`);
  }
  get reason(): string {
    return this.body.reason ?? "";
  }
}

// url makes an API path relative to the page, so the console works under
// a path prefix: "v1/sessions".
export function url(path: string): string {
  return path.replace(/^\//, "");
}

export function headers(key = apiKey()): Headers {
  const h = new Headers({ Accept: "application/json" });
  if (key) h.set("X-API-Key", key);
  return h;
}

// call sends one request and returns the JSON answer, or throws ApiError.
export async function call<T>(method: string, path: string, body?: unknown, key?: string): Promise<T> {
  const h = headers(key ?? apiKey());
  const init: RequestInit = { method, headers: h };
  if (body !== undefined) {
    h.set("Content-Type", "application/json");
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(url(path), init);
  const text = await resp.text();
  let data: unknown = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!resp.ok) {
    if (resp.status === 401) window.dispatchEvent(new CustomEvent("sylk:unauthenticated"));
    throw new ApiError(resp.status, data as Partial<ApiErrorBody>);
  }
  return data as T;
}

export const get = <T>(path: string) => call<T>("GET", path);
export const post = <T>(path: string, body: unknown = {}) => call<T>("POST", path, body);

// idOf is the last segment of a resource name: sessions/abc → abc.
export function idOf(name: string | undefined): string {
  return (name ?? "").split("/").pop() ?? "";
}
