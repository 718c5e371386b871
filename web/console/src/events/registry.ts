// Each event kind is drawn by one small renderer registered here under its
// type; a kind with none is drawn generically (its text and source). A new
// kind is one register() call in a file of events/.
import { h } from "../dom";
import type { Schemas } from "../api";
import type { SylkEvent } from "../stream";

export interface EventContext {
  // reply sends text into the session's chat (a clarification's choice).
  reply(text: string, inReplyTo?: string): void;
}

export type Renderer = (e: SylkEvent, ctx: EventContext) => HTMLElement;
type EventType = Schemas["v1EventType"];

const renderers = new Map<EventType, Renderer>();

export function register(types: EventType | EventType[], r: Renderer): void {
  for (const t of [types].flat()) renderers.set(t, r);
}

export function render(e: SylkEvent, ctx: EventContext): HTMLElement {
  const r = (e.type && renderers.get(e.type)) || generic;
  const el = r(e, ctx);
  el.classList.add("event");
  el.dataset.type = e.type ?? "";
  if (e.sequence) el.dataset.sequence = e.sequence;
  return el;
}

// card is the common frame: who, what kind, and the body.
export function card(e: SylkEvent, kind: string, ...body: (Node | string | null | false)[]): HTMLElement {
  return h(
    "article",
    { class: `card kind-${kind}` },
    h("header", {}, h("span", { class: "source" }, e.source || "sylk"), " ", h("span", { class: "label" }, kind)),
    ...body,
  );
}

function generic(e: SylkEvent): HTMLElement {
  const kind = (e.type ?? "EVENT_TYPE_UNSPECIFIED").replace("EVENT_TYPE_", "").toLowerCase().replace(/_/g, " ");
  return card(e, kind, h("p", {}, e.text ?? ""));
}
