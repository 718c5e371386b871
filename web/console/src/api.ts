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
  if (key === null) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ROLE);
  } else sessionStorage.setItem(KEY, key);
}

const ROLE = "sylk.role";

// role is the signed-in user's role (admin, member, viewer), or null until
// learnRole has run for this tab.
export function role(): string | null {
  return sessionStorage.getItem(ROLE);
}

// learnRole finds the caller's role from the keys it may list: admins list
// the tenant's keys, everyone else only their own, so the caller's key is
// among them, known by its display prefix. A key the list does not show
// (an error) counts as a member's: the console then hides admin links, and
// the API decides what each call may do either way.
export async function learnRole(key = apiKey()): Promise<string> {
  let found = "member";
  try {
    const r = await call<Schemas["v1ListKeysResponse"]>("GET", "v1/keys", undefined, key ?? undefined);
    const mine = (r.apiKeys ?? []).filter((k) => k.prefix && key?.startsWith(k.prefix));
    found = mine.some((k) => k.role === "admin") ? "admin" : (mine[0]?.role ?? "member");
  } catch {
    found = "member";
  }
  sessionStorage.setItem(ROLE, found);
  return found;
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
