// Usage and cost of the model calls, grouped as chosen.
import { h, field } from "../dom";
import { get, type Schemas } from "../api";
import { errorText, statusLine, title } from "./common";

const groups = ["agent", "model", "provider", "session", "period"];

export function usage(main: HTMLElement): void {
  const status = statusLine();
  const by = h("select", { name: "groupBy" }, groups.map((g) => h("option", { value: g }, g)));
  const period = h("select", { name: "period" }, ["day", "hour", "week", "month"].map((p) => h("option", { value: p }, p)));
  const table = h("div", {});
  const load = async () => {
    try {
      const q = new URLSearchParams({ groupBy: by.value, period: period.value });
      const r = await get<Schemas["v1GetUsageReportResponse"]>(`v1/usage?${q}`);
      const rows = r.rows ?? [];
      status.show(rows.length ? "" : "No model calls recorded yet.");
      table.replaceChildren(report(rows, r.total, r.currency ?? "USD"));
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  by.addEventListener("change", () => void load());
  period.addEventListener("change", () => void load());
  main.replaceChildren(title("Usage and cost"), h("div", { class: "inline" }, field("Group by", by), field("Period", period)), status, table);
  void load();
}

function report(rows: Schemas["v1UsageRow"][], total: Schemas["v1UsageRow"] | undefined, currency: string): HTMLElement {
  const cols = ["Group", "Requests", "Input tokens", "Output tokens", `Cost (${currency})`, "Avg latency (ms)"];
  const line = (label: string, r: Schemas["v1UsageRow"]) =>
    h("tr", {}, h("th", { scope: "row" }, label), h("td", {}, r.requests ?? "0"), h("td", {}, r.inputTokens ?? "0"), h("td", {}, r.outputTokens ?? "0"), h("td", {}, (r.costUsd ?? 0).toFixed(4)), h("td", {}, (r.avgLatencyMs ?? 0).toFixed(0)));
  return h(
    "table",
    { class: "usage" },
    h("caption", {}, "Model usage"),
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => line(Object.values(r.group ?? {}).join(" / ") || "all", r))),
    total ? h("tfoot", {}, line("Total", total)) : null,
  );
}
