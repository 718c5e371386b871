// Code search with filters: repository, mode, language, path glob, limit.
import { h, field } from "../dom";
import { get, post, type Schemas } from "../api";
import { errorText, statusLine, title } from "./common";

const modes: Schemas["v1SearchMode"][] = ["SEARCH_MODE_HYBRID", "SEARCH_MODE_LEXICAL", "SEARCH_MODE_SEMANTIC", "SEARCH_MODE_REGEX"];

export function search(main: HTMLElement, _arg: string, query: URLSearchParams): void {
  const status = statusLine();
  const q = h("input", { name: "query", type: "search", required: true, value: query.get("q") ?? "" });
  const repo = h("select", { name: "repository" }, h("option", { value: "" }, "All repositories"));
  const mode = h("select", { name: "mode" }, modes.map((m) => h("option", { value: m }, m.replace("SEARCH_MODE_", "").toLowerCase())));
  const lang = h("input", { name: "language", placeholder: "e.g. go" });
  const glob = h("input", { name: "pathGlob", placeholder: "e.g. billing/**" });
  const limit = h("input", { name: "limit", type: "number", min: 1, max: 100, value: 10 });
  const results = h("ol", { class: "hits", "aria-label": "Results" });
  const form = h(
    "form",
    { class: "search", role: "search" },
    field("Query", q),
    field("Repository", repo),
    field("Mode", mode),
    field("Language", lang),
    field("Path", glob),
    field("Limit", limit),
    h("button", { type: "submit" }, "Search"),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body: Schemas["v1SearchCodeRequest"] = { query: q.value, mode: mode.value as Schemas["v1SearchMode"], pageSize: Number(limit.value) || 10 };
    if (repo.value) body.repositories = [repo.value];
    if (lang.value) body.language = lang.value;
    if (glob.value) body.pathGlob = glob.value;
    status.show("Searching…");
    try {
      const r = await post<Schemas["v1SearchCodeResponse"]>("v1/code:search", body);
      const hits = r.hits ?? [];
      status.show(hits.length ? `${hits.length} results${r.truncated ? " (truncated)" : ""}.` : r.hint || "No results.");
      results.replaceChildren(...hits.map(hit));
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  main.replaceChildren(title("Search code"), form, status, results);
  q.focus();
  void get<Schemas["v1ListRepositoriesResponse"]>("v1/repositories?pageSize=100").then((r) => {
    for (const x of r.repositories ?? []) repo.append(h("option", { value: x.name ?? "" }, x.displayName || x.name || ""));
    repo.value = query.get("repo") ?? "";
    if (q.value) form.requestSubmit();
  }).catch(() => undefined);
}

function hit(x: Schemas["v1CodeHit"]): HTMLElement {
  const where = `${x.path ?? ""}:${x.lineStart ?? ""}${x.lineEnd && x.lineEnd !== x.lineStart ? "-" + x.lineEnd : ""}`;
  return h(
    "li",
    { class: "hit" },
    h("p", {}, h("code", {}, where), x.symbol ? ` ${x.symbol}` : "", h("span", { class: "muted" }, ` ${x.language ?? ""} · score ${(x.score ?? 0).toFixed(3)}`)),
    x.snippet ? h("pre", {}, x.snippet) : null,
  );
}
