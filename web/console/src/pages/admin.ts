// The admin pages: model providers with the tenant's keys for them, and
// the audit log with its chain check.
import { h, when } from "../dom";
import { call, get, post, type Schemas } from "../api";
import { statusLine, title } from "./common";
import { actionForm, listOf } from "./forms";

const settable: [string, string][] = ["anthropic", "openai", "gemini"].map((p) => [p, p]);

export function providers(main: HTMLElement): void {
  const status = statusLine();
  const list = h("ul", { class: "list", "aria-label": "Providers" });
  const load = async () => {
    const r = await get<Schemas["v1ListProvidersResponse"]>("v1/providers");
    listOf(
      list,
      r.providers,
      (p) => h("li", {}, h("strong", {}, p.name ?? ""), h("span", { class: "muted" }, ` ${p.configured ? "configured" : "not configured"} · key: ${p.credentialSource ?? ""}${p.isDefault ? " · default" : ""} · ${p.models?.length ?? 0} models${p.credentialsUpdateTime ? " · key stored " + when(p.credentialsUpdateTime) : ""}`)),
      "No providers.",
    );
  };
  const set = actionForm(
    "Store a provider key",
    [
      { name: "provider", label: "Provider", kind: "select", options: settable, value: "anthropic" },
      { name: "apiKey", label: "Key", kind: "password", required: true },
      { name: "baseUrl", label: "Base URL", placeholder: "OpenAI-compatible server (openai)" },
    ],
    "Store key",
    status,
    async (v) => {
      await call("PUT", `v1/providers/${encodeURIComponent(v.provider ?? "")}/credentials`, { apiKey: v.apiKey, baseUrl: v.baseUrl });
      await load();
      return `Stored the tenant's key for ${v.provider}; it is never shown again.`;
    },
  );
  const verify = actionForm("Check a provider's key", [{ name: "provider", label: "Provider", kind: "select", options: settable, value: "anthropic" }], "Verify", status, async (v) => {
    const r = await post<Schemas["v1VerifyProviderResponse"]>(`v1/providers/${encodeURIComponent(v.provider ?? "")}:verify`, {});
    return r.valid ? `${v.provider}: the key works.` : `${v.provider}: ${r.message ?? "the key is refused"}`;
  });
  main.replaceChildren(title("Model providers"), list, h("h2", {}, "Store a key (admins)"), set, verify, status);
  void load().catch(() => undefined);
}

export function audit(main: HTMLElement): void {
  const status = statusLine();
  const list = h("ol", { class: "list audit", "aria-label": "Audit records" });
  const search = actionForm(
    "Filter the audit log",
    [
      { name: "action", label: "Action", placeholder: "run.cancelled, api_key.created, …" },
      { name: "actor", label: "Actor", placeholder: "a user" },
    ],
    "Show",
    status,
    async (v) => {
      const q = new URLSearchParams({ pageSize: "100" });
      if (v.action) q.set("action", v.action);
      if (v.actor) q.set("actor", v.actor);
      const r = await get<Schemas["v1ListAuditRecordsResponse"]>(`v1/audit?${q}`);
      listOf(list, r.records, record, "No records.");
      return `${r.records?.length ?? 0} records.`;
    },
  );
  const verify = actionForm("Verify the audit chain", [], "Verify the chain", status, async () => {
    const r = await post<Schemas["v1VerifyAuditLogResponse"]>("v1/audit:verify", {});
    return r.intact
      ? `Intact: ${r.recordsChecked ?? 0} records checked.`
      : `Broken at record ${r.firstBreak?.sequence ?? "?"}: ${r.firstBreak?.problem ?? ""}.`;
  });
  main.replaceChildren(title("Audit log"), search, verify, status, list);
  search.requestSubmit();
}

function record(r: Schemas["v1AuditRecord"]): HTMLElement {
  const details = Object.entries(r.details ?? {}).map(([k, v]) => `${k}=${v}`).join(" ");
  return h("li", {}, h("strong", {}, r.action ?? ""), ` ${r.target ?? ""}`, h("span", { class: "muted" }, ` by ${r.actor ?? ""} · ${when(r.createTime)} · #${r.sequence ?? ""}${details ? " · " + details : ""}`));
}
