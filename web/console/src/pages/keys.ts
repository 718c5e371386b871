// API keys (admins): list, create (the key is shown once), revoke.
import { h, field, when } from "../dom";
import { get, post, type Schemas } from "../api";
import { errorText, statusLine, title } from "./common";

export function keys(main: HTMLElement): void {
  const status = statusLine();
  const list = h("tbody", {});
  const role = h("select", { name: "role" }, ["member", "viewer", "admin"].map((r) => h("option", { value: r }, r)));
  const desc = h("input", { name: "description" });
  const user = h("input", { name: "userId", required: true });
  const shown = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "inline", "aria-label": "Create a key" }, field("Role", role), field("Description", desc), field("User", user), h("button", { type: "submit" }, "Create key"));
  const load = async () => {
    try {
      const r = await get<Schemas["v1ListKeysResponse"]>("v1/keys");
      list.replaceChildren(...(r.apiKeys ?? []).map((k) => row(k, status, load)));
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body: Schemas["v1CreateKeyRequest"] = { role: role.value, description: desc.value, userId: user.value };
    try {
      const r = await post<Schemas["v1CreateKeyResponse"]>("v1/keys", body);
      shown.replaceChildren(h("p", {}, "The new key (shown once; copy it now): ", h("code", { class: "secret" }, r.key ?? "")));
      await load();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  const cols = ["Prefix", "Role", "User", "Description", "Created", "Last used", "State", ""];
  main.replaceChildren(
    title("API keys"),
    form,
    shown,
    status,
    h("table", { class: "keys" }, h("caption", {}, "Keys of this tenant"), h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c || h("span", { class: "sr-only" }, "Actions"))))), list),
  );
  void load();
}

function row(k: Schemas["v1ApiKey"], status: ReturnType<typeof statusLine>, reload: () => Promise<void>): HTMLElement {
  const revoke = async () => {
    if (!confirm(`Revoke key ${k.prefix}?`)) return;
    try {
      await post(`v1/keys/${encodeURIComponent(k.id ?? "")}:revoke`, {});
      await reload();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  const state = k.revokeTime ? "revoked" : k.expireTime && new Date(k.expireTime) < new Date() ? "expired" : "active";
  return h(
    "tr",
    {},
    h("td", {}, h("code", {}, k.prefix ?? "")),
    h("td", {}, k.role ?? ""),
    h("td", {}, k.userId ?? ""),
    h("td", {}, k.description ?? ""),
    h("td", {}, when(k.createTime)),
    h("td", {}, when(k.lastUseTime)),
    h("td", {}, state),
    h("td", {}, state === "active" ? h("button", { type: "button", class: "danger", onclick: () => void revoke() }, "Revoke") : null),
  );
}
