// API keys (admins): list, create (the key is shown once), rotate, revoke.
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
      list.replaceChildren(...(r.apiKeys ?? []).map((k) => row(k, { status, shown, reload: load })));
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

// rotateGrace is how long a rotated key keeps working, so that whatever
// uses it can take the new one first.
const rotateGrace = "3600s";

interface rowCtx {
  status: ReturnType<typeof statusLine>;
  shown: HTMLElement;
  reload: () => Promise<void>;
}

function row(k: Schemas["v1ApiKey"], { status, shown, reload }: rowCtx): HTMLElement {
  const rotate = async () => {
    try {
      const r = await post<Schemas["v1RotateKeyResponse"]>(`v1/keys/${encodeURIComponent(k.id ?? "")}:rotate`, { gracePeriod: rotateGrace });
      shown.replaceChildren(
        h("p", {}, `The new key for ${k.userId ?? ""} (shown once; copy it now; the old one works for another hour): `, h("code", { class: "secret" }, r.key ?? "")),
      );
      await reload();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  const revoke = async () => {
    if (!confirm(`Revoke key ${k.prefix}?`)) return;
    try {
      await post(`v1/keys/${encodeURIComponent(k.id ?? "")}:revoke`, {});
      await reload();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  const now = new Date();
  const state = k.revokeTime
    ? new Date(k.revokeTime) > now
      ? "rotating"
      : "revoked"
    : k.expireTime && new Date(k.expireTime) < now
      ? "expired"
      : "active";
  const rotateButton = h("button", { type: "button", "aria-label": `Rotate key ${k.prefix ?? ""}`, onclick: () => void rotate() }, "Rotate");
  const revokeButton = h("button", { type: "button", class: "danger", "aria-label": `Revoke key ${k.prefix ?? ""}`, onclick: () => void revoke() }, "Revoke");
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
    h("td", {}, state === "active" ? [rotateButton, " ", revokeButton] : state === "rotating" ? revokeButton : null),
  );
}
