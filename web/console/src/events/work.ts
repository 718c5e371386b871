// Plans, runs and what runs do: node states, the Engineer's tool calls as
// they happen, what an agent writes, review findings, deliveries.
import { h, short } from "../dom";
import { idOf } from "../api";
import { card, register } from "./registry";

register(["EVENT_TYPE_PLAN_AWAITING_APPROVAL", "EVENT_TYPE_PLAN_APPROVED", "EVENT_TYPE_PLAN_REJECTED", "EVENT_TYPE_PLAN_REVISED"], (e) => {
  const p = e.plan ?? e.planRevised ?? {};
  const name = "plan" in p ? p.plan : undefined;
  return card(
    e,
    "plan",
    h("p", {}, e.text ?? ""),
    name ? h("a", { href: `#/plan/${name}` }, `Open plan ${"title" in p && p.title ? p.title : idOf(name)}`) : null,
  );
});

register(
  ["EVENT_TYPE_RUN_STARTED", "EVENT_TYPE_RUN_COMPLETED", "EVENT_TYPE_RUN_PAUSED", "EVENT_TYPE_RUN_RESUMED", "EVENT_TYPE_RUN_SETTLED", "EVENT_TYPE_RUN_DELIVERED", "EVENT_TYPE_RUN_SESSION_CHECK", "EVENT_TYPE_RUN_FIX_REQUESTED"],
  (e) => {
    const r = e.run ?? {};
    const d = r.delivery;
    return card(
      e,
      "run",
      h("p", {}, e.text ?? "", r.state ? h("span", { class: `state ${short(r.state, "RUN_STATE_")}` }, ` ${short(r.state, "RUN_STATE_")}`) : null),
      d?.branch ? h("p", {}, "Delivered on branch ", h("code", {}, d.branch)) : null,
      r.run ? h("a", { href: `#/run/${r.run.includes("/") ? r.run : "runs/" + r.run}` }, "Watch the run") : null,
    );
  },
);

register(
  ["EVENT_TYPE_NODE_DISPATCHED", "EVENT_TYPE_NODE_COMPLETED", "EVENT_TYPE_NODE_RETRYING", "EVENT_TYPE_NODE_ACTION", "EVENT_TYPE_NODE_REOPENED", "EVENT_TYPE_NODE_ESCALATED", "EVENT_TYPE_NODE_HANDED_OFF"],
  (e) => {
    const n = e.node ?? {};
    return card(e, "node", h("p", {}, h("code", {}, n.node ?? ""), " ", h("span", { class: "state" }, short(n.state, "NODE_STATE_")), " ", e.text ?? ""));
  },
);

register("EVENT_TYPE_TOOL_CALL", (e) => {
  const t = e.toolCall ?? {};
  const status = short(t.status, "TOOL_CALL_STATUS_");
  return card(
    e,
    "tool",
    h("p", {}, h("code", {}, t.tool ?? "tool"), " ", h("span", { class: `state ${status}` }, status), t.duration ? ` in ${t.duration}` : "", t.summary ? ` — ${t.summary}` : ""),
    t.args ? h("details", {}, h("summary", {}, "Arguments"), h("pre", {}, t.args)) : null,
  );
});

register(["EVENT_TYPE_AGENT_TEXT", "EVENT_TYPE_AGENT_WARNING", "EVENT_TYPE_AGENT_REVERTED"], (e) =>
  card(e, "agent", h("p", { class: "agent-text" }, e.agent?.text || e.text || "")),
);

register("EVENT_TYPE_REVIEW_COMPLETED", (e) => {
  const r = e.review?.result ?? {};
  return card(
    e,
    "review",
    h("p", {}, r.summary || e.text || ""),
    h("ul", { class: "findings" }, (r.findings ?? []).map((f) => h("li", {}, h("strong", {}, f.severity ?? ""), ` ${f.file ?? ""}${f.line ? ":" + f.line : ""} `, f.message ?? ""))),
  );
});

register("EVENT_TYPE_INDEXING_PROGRESS", (e) => {
  const p = e.indexing ?? {};
  const done = Number(p.filesDone ?? 0);
  const total = Number(p.filesTotal ?? 0);
  return card(e, "indexing", h("p", {}, e.text ?? ""), total ? h("progress", { max: total, value: done, "aria-label": "Indexing progress" }) : null);
});
