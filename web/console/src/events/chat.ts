// The chat's own kinds: the user's message, the Guide's routing decision,
// an agent's answer with its citations, clarifications, errors.
import { h } from "../dom";
import type { Schemas } from "../api";
import { card, register } from "./registry";

register("EVENT_TYPE_MESSAGE_RECEIVED", (e) =>
  h("article", { class: "card kind-user" }, h("header", {}, h("span", { class: "source" }, "you")), h("p", {}, e.text ?? "")),
);

register(["EVENT_TYPE_MESSAGE_ROUTED", "EVENT_TYPE_MESSAGE_REROUTED"], (e) => {
  const r = e.messageRouted;
  const detail = r
    ? `→ ${r.target ?? "?"} (${r.tier ?? "tier ?"}, confidence ${(r.confidence ?? 0).toFixed(2)})${r.reason ? ": " + r.reason : ""}`
    : e.text ?? "";
  return card(e, "routed", h("p", { class: "muted" }, detail));
});

register("EVENT_TYPE_MESSAGE_ANSWERED", (e) => {
  const a = e.messageAnswered ?? {};
  return card(
    e,
    "answer",
    h("div", { class: "answer-text" }, a.text || e.text || ""),
    sources(a),
    a.ungrounded ? h("p", { class: "warn" }, "Not every claim could be checked against a source.") : null,
  );
});

// sources lists the answer's citations, or else the hits it was built
// from; each opens to show where it points.
function sources(a: Schemas["v1AgentAnswer"]): HTMLElement | null {
  const cites = a.citations ?? [];
  const hits = a.hits ?? [];
  if (!cites.length && !hits.length) return null;
  const snippet = (path?: string) => hits.find((x) => x.path === path)?.snippet;
  const items = cites.length
    ? cites.map((c) => citation(loc(c.path || c.title || c.name, c.lineStart, c.lineEnd), snippet(c.path) ?? c.heading, c.problem))
    : hits.slice(0, 5).map((x) => citation(loc(x.path || x.title || x.name, x.lineStart, x.lineEnd), x.snippet))
  return h("div", { class: "citations" }, h("h2", { class: "h4" }, cites.length ? "Citations" : "Sources"), h("ul", {}, items));
}

function loc(path?: string, start?: number, end?: number): string {
  if (!start) return path ?? "";
  return end && end !== start ? `${path}:${start}-${end}` : `${path}:${start}`;
}

function citation(where: string, snippet?: string, problem?: string): HTMLElement {
  return h(
    "li",
    {},
    h(
      "details",
      { class: "citation" },
      h("summary", {}, where, problem ? h("span", { class: "warn" }, ` (${problem})`) : null),
      snippet ? h("pre", {}, snippet) : h("p", { class: "muted" }, "No excerpt for this source."),
    ),
  );
}

register("EVENT_TYPE_CLARIFICATION_REQUESTED", (e, ctx) => {
  const c = e.clarificationRequested ?? {};
  const group = h(
    "div",
    { class: "options", role: "group", "aria-label": "Answers" },
    (c.options ?? []).map((o) =>
      // A clarification is answered by its name.
      h("button", { type: "button", onclick: () => ctx.reply(o, c.clarification) }, o),
    ),
  );
  return card(e, "clarification", h("p", {}, e.text ?? ""), group);
});

register(["EVENT_TYPE_MESSAGE_TIMEOUT", "EVENT_TYPE_MESSAGE_UNDELIVERABLE", "EVENT_TYPE_ERROR"], (e) =>
  card(e, "error", h("p", { class: "error", role: "alert" }, e.error?.message || e.text || e.messageUnanswered?.detail || "")),
);
