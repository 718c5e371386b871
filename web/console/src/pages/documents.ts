// Documents (the Academic): ingest a markdown document, search the
// sections, list what is there.
import { h, when } from "../dom";
import { get, post, type Schemas } from "../api";
import { statusLine, title } from "./common";
import { actionForm, listOf } from "./forms";

export function documents(main: HTMLElement): void {
  const status = statusLine();
  const hits = h("ol", { class: "hits", "aria-label": "Matching sections" });
  const docs = h("ul", { class: "list", "aria-label": "Documents" });
  const load = async () => {
    const r = await get<Schemas["v1ListDocumentsResponse"]>("v1/documents?pageSize=100");
    listOf(docs, r.documents, (d) => h("li", {}, d.title ?? "", h("span", { class: "muted" }, ` ${d.sectionCount ?? 0} sections · ${when(d.createTime)}`)), "No documents yet.");
  };
  const search = actionForm("Search documents", [{ name: "query", label: "Query", kind: "search", required: true }], "Search", status, async (v) => {
    const r = await post<Schemas["v1SearchDocumentsResponse"]>("v1/documents:search", { query: v.query });
    listOf(hits, r.hits, section, "No matching sections.");
    return `${r.hits?.length ?? 0} sections.`;
  });
  const add = actionForm(
    "Add a document",
    [
      { name: "title", label: "Title", required: true },
      { name: "source", label: "Source", placeholder: "a URL or a path" },
      { name: "content", label: "Markdown", kind: "textarea", required: true },
    ],
    "Add document",
    status,
    async (v) => {
      const r = await post<Schemas["v1CreateDocumentResponse"]>("v1/documents", { title: v.title, source: v.source, content: v.content });
      await load();
      return `Added "${r.document?.title ?? ""}": ${r.document?.sectionCount ?? 0} sections.`;
    },
  );
  main.replaceChildren(title("Documents"), search, status, hits, h("h2", {}, "Add a document"), add, h("h2", {}, "All documents"), docs);
  void load().catch(() => undefined);
}

function section(x: Schemas["v1SectionHit"]): HTMLElement {
  return h(
    "li",
    { class: "hit" },
    h("p", {}, h("strong", {}, `${x.documentTitle ?? ""} › ${x.heading ?? ""}`), h("span", { class: "muted" }, ` lines ${x.lineStart ?? ""}-${x.lineEnd ?? ""}`)),
    x.snippet ? h("pre", {}, x.snippet) : null,
  );
}
