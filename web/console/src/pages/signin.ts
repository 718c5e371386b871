// Sign in with an API key. The key is checked with one read call and then
// kept in sessionStorage for this tab.
import { h, field } from "../dom";
import { call, learnRole, setApiKey } from "../api";
import { errorText, statusLine } from "./common";

export function signIn(main: HTMLElement, done: () => void): void {
  const input = h("input", { type: "password", name: "apiKey", id: "api-key", autocomplete: "off", required: true, spellcheck: "false" });
  const status = statusLine();
  const form = h(
    "form",
    { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in to Sylk"),
    h("p", {}, "Paste an API key. It stays in this browser tab and is sent only in a request header."),
    field("API key", input),
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    status.show("Checking the key…");
    try {
      await call("GET", "v1/sessions?pageSize=1", undefined, key);
      setApiKey(key);
      // The role decides which links the console shows (API keys: admins).
      await learnRole(key);
      done();
    } catch (err) {
      status.show(`Sign-in failed: ${errorText(err)}`, "error");
    }
  });
  main.replaceChildren(form);
  input.focus();
}
