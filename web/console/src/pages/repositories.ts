// Repositories: the list with index states, a form to register one, and
// indexing progress of each running index operation.
import { h, field, short, when } from "../dom";
import { get, post, type Schemas } from "../api";
import { errorText, poll, statusLine, title } from "./common";

type Repository = Schemas["v1Repository"];

export function repositories(main: HTMLElement): () => void {
  const status = statusLine();
  const list = h("ul", { class: "list", "aria-label": "Repositories" });
  const path = h("input", { name: "path", placeholder: "/srv/src/project or a git URL", required: true });
  const name = h("input", { name: "displayName" });
  const form = h("form", { class: "inline", "aria-label": "Register a repository" }, field("Path or URL", path), field("Name", name), h("button", { type: "submit" }, "Register and index"));
  const stops: (() => void)[] = [];
  const load = async () => {
    try {
      const r = await get<Schemas["v1ListRepositoriesResponse"]>("v1/repositories?pageSize=100");
      const items = r.repositories ?? [];
      if (!items.length) status.show("No repositories yet: register one above.");
      list.replaceChildren(...items.map((x) => item(x, stops, load)));
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = path.value.trim();
    const body: Repository = /^[a-z+]+:\/\/|^git@/.test(v) ? { url: v } : { path: v };
    if (name.value) body.displayName = name.value;
    try {
      await post<Schemas["v1CreateRepositoryResponse"]>("v1/repositories?index=true&async=true", body);
      status.show("Registered; indexing.");
      path.value = "";
      name.value = "";
      await load();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  main.replaceChildren(title("Repositories"), form, status, list);
  void load();
  return () => stops.forEach((s) => s());
}

function item(x: Repository, stops: (() => void)[], reload: () => Promise<void>): HTMLElement {
  const state = short(x.indexState, "INDEX_STATE_");
  const progress = h("div", { class: "progress" });
  const reindex = async () => {
    try {
      const r = await post<Schemas["v1IndexRepositoryResponse"]>(`v1/${x.name}:index`, { async: true } satisfies Schemas["LibrarianServiceIndexRepositoryBody"]);
      if (r.operation) stops.push(watch(r.operation, progress, reload));
    } catch (err) {
      progress.replaceChildren(h("p", { class: "error", role: "alert" }, errorText(err)));
    }
  };
  if (x.operation && (x.indexState === "INDEX_STATE_INDEXING" || x.indexState === "INDEX_STATE_PENDING")) {
    stops.push(watch(x.operation, progress, reload));
  }
  return h(
    "li",
    { "data-repository": x.name ?? "" },
    h("strong", {}, x.displayName || x.name || ""),
    h("span", { class: "muted" }, ` ${x.path || x.url || ""}`),
    h("p", {}, h("span", { class: `state ${state}` }, state), ` · ${x.fileCount ?? 0} files, ${x.chunkCount ?? 0} chunks`, x.indexTime ? ` · indexed ${when(x.indexTime)}` : ""),
    x.indexError ? h("p", { class: "error" }, x.indexError) : null,
    progress,
    h("button", { type: "button", onclick: () => void reindex() }, "Index again"),
    " ",
    h("a", { href: `#/search?repo=${encodeURIComponent(x.name ?? "")}` }, "Search it"),
  );
}

// watch polls an index operation and draws its progress until it is done.
function watch(op: string, el: HTMLElement, reload: () => Promise<void>): () => void {
  const opName = op.includes("/") ? op : `operations/${op}`;
  return poll(async () => {
    const o = (await get<Schemas["v1GetOperationResponse"]>(`v1/${opName}`)).operation ?? {};
    const m = o.metadata ?? {};
    const done = Number(m.filesDone ?? 0);
    const total = Number(m.filesTotal ?? 0);
    el.replaceChildren(
      h("p", {}, `${short(m.phase, "INDEX_PHASE_")}: ${done}/${total} files, ${m.chunksDone ?? 0}/${m.chunksTotal ?? 0} chunks`),
      h("progress", { max: Math.max(total, 1), value: done, "aria-label": `Indexing ${m.repository ?? ""}` }),
    );
    if (o.done) {
      if (o.error) el.append(h("p", { class: "error", role: "alert" }, o.error.message ?? "indexing failed"));
      await reload();
    }
    return !!o.done;
  }, 1000);
}
