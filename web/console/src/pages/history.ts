// History (the Archivalist): search what the tenant's sessions recorded,
// record an entry, and see the newest.
import { h, when } from "../dom";
import { get, post, type Schemas } from "../api";
import { statusLine, title } from "./common";
import { actionForm, listOf, type FieldSpec } from "./forms";

const windows: [string, string][] = [["", "any time"], ["recent", "last 7 days"], ["today", "today"], ["this_week", "this week"], ["last_month", "last month"], ["last_year", "last year"]];

const categories: FieldSpec = { name: "category", label: "Category", placeholder: "decision, failure, note, …" };

export function history(main: HTMLElement): void {
  const status = statusLine();
  const hits = h("ol", { class: "hits", "aria-label": "Matching entries" });
  const recent = h("ul", { class: "list", "aria-label": "Newest entries" });
  const load = async () => {
    const r = await get<Schemas["v1ListEntriesResponse"]>("v1/entries?pageSize=50");
    listOf(recent, r.entries, (e) => entry(e), "No entries yet.");
  };
  const search = actionForm(
    "Search history",
    [{ name: "query", label: "Query", kind: "search", required: true }, categories, { name: "timeScope", label: "When", kind: "select", options: windows }],
    "Search",
    status,
    async (v) => {
      const body: Schemas["v1SearchEntriesRequest"] = { query: v.query, crossSession: true };
      if (v.category) body.category = v.category;
      if (v.timeScope) body.timeScope = v.timeScope;
      const r = await post<Schemas["v1SearchEntriesResponse"]>("v1/entries:search", body);
      listOf(hits, r.hits?.filter((x) => x.entry), (x) => entry(x.entry!, x.snippet), "Nothing recorded matches.");
      return `${r.hits?.length ?? 0} entries.`;
    },
  );
  const record = actionForm(
    "Record an entry",
    [{ ...categories, required: true, value: "decision" }, { name: "title", label: "Title", required: true }, { name: "content", label: "Content", kind: "textarea" }],
    "Record",
    status,
    async (v) => {
      const r = await post<Schemas["v1CreateEntryResponse"]>("v1/entries", { category: v.category, title: v.title, content: v.content });
      await load();
      return `Recorded "${r.entry?.title ?? ""}".`;
    },
  );
  main.replaceChildren(title("History"), search, status, hits, h("h2", {}, "Record an entry"), record, h("h2", {}, "Newest entries"), recent);
  void load().catch(() => undefined);
}

function entry(e: Schemas["v1Entry"], snippet?: string): HTMLElement {
  return h(
    "li",
    { class: "hit" },
    h("p", {}, h("strong", {}, e.title ?? ""), h("span", { class: "muted" }, ` ${e.category ?? ""} · ${when(e.createTime)}${e.repository ? " · " + e.repository : ""}`)),
    snippet || e.content ? h("pre", {}, snippet || e.content || "") : null,
  );
}
