// Helpers the pages share: a status line for errors and progress, and a
// poll loop that stops with the page.
import { h } from "../dom";
import { ApiError } from "../api";

export function statusLine(): HTMLElement & { show(msg: string, kind?: "error" | "info"): void } {
  const el = h("p", { class: "status", role: "status", "aria-live": "polite" }) as unknown as HTMLElement & {
    show(msg: string, kind?: "error" | "info"): void;
  };
  el.show = (msg, kind = "info") => {
    el.textContent = msg;
    el.className = `status ${kind}`;
    el.setAttribute("role", kind === "error" ? "alert" : "status");
  };
  return el;
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError) return err.reason ? `${err.message} (${err.reason})` : err.message;
  return String(err);
}

// poll calls fn now and every ms until it returns true or stop is called.
export function poll(fn: () => Promise<boolean>, ms: number): () => void {
  let stopped = false;
  let timer: number | undefined;
  const tick = async () => {
    let done = false;
    try {
      done = await fn();
    } catch {
      done = false;
    }
    if (!stopped && !done) timer = window.setTimeout(tick, ms);
  };
  void tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

export function title(text: string, ...extra: (Node | string)[]): HTMLElement {
  return h("div", { class: "title" }, h("h1", {}, text), ...extra);
}
