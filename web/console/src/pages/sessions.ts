// Sessions: the list, a form for a new one, and a session's chat with its
// live event stream.
import { h, field, short, when } from "../dom";
import { get, post, idOf, type Schemas } from "../api";
import { streamEvents } from "../stream";
import { render, type EventContext } from "../events/registry";
import { errorText, statusLine, title } from "./common";

type Session = Schemas["v1Session"];

export function sessions(main: HTMLElement): void {
  const status = statusLine();
  const list = h("ul", { class: "list", "aria-label": "Sessions" });
  const name = h("input", { name: "displayName", placeholder: "e.g. billing fixes" });
  const repo = h("select", { name: "repository" }, h("option", { value: "" }, "(none)"));
  const form = h(
    "form",
    { class: "inline", "aria-label": "New session" },
    field("Name", name),
    field("Repository", repo),
    h("button", { type: "submit" }, "New session"),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const body: Session = { displayName: name.value || "session" };
      if (repo.value) body.repository = repo.value;
      const r = await post<Schemas["v1CreateSessionResponse"]>("v1/sessions", body);
      location.hash = `#/chat/${r.session?.name}`;
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  main.replaceChildren(title("Sessions"), form, status, list);
  void get<Schemas["v1ListRepositoriesResponse"]>("v1/repositories?pageSize=100").then((r) => {
    for (const x of r.repositories ?? []) repo.append(h("option", { value: x.name ?? "" }, x.displayName || x.name || ""));
  }).catch(() => undefined);
  get<Schemas["v1ListSessionsResponse"]>("v1/sessions?pageSize=50")
    .then((r) => {
      const items = r.sessions ?? [];
      if (!items.length) status.show("No sessions yet: start one above.");
      list.replaceChildren(...items.map(sessionItem));
    })
    .catch((err) => status.show(errorText(err), "error"));
}

function sessionItem(s: Session): HTMLElement {
  return h(
    "li",
    {},
    h("a", { href: `#/chat/${s.name}` }, s.displayName || idOf(s.name)),
    h("span", { class: "muted" }, ` ${short(s.state, "SESSION_STATE_")} · ${when(s.lastActiveTime || s.createTime)}`),
    " ",
    h("a", { href: `#/plans/${s.name}`, class: "small" }, "plans"),
  );
}

// chat is one session: its events as they happen, and a message box.
export function chat(main: HTMLElement, name: string): () => void {
  const log = h("ol", { class: "events", "aria-label": "Conversation", "aria-live": "polite", tabindex: 0 });
  const status = statusLine();
  const text = h("textarea", { name: "text", rows: 2, required: true, placeholder: "Ask about the code, or ask for a change" });
  const send = async (msg: string, inReplyTo?: string) => {
    status.show("Sending…");
    try {
      const body: Schemas["GuideServiceSendMessageBody"] = { text: msg };
      if (inReplyTo) body.inReplyTo = inReplyTo;
      const r = await post<Schemas["v1SendMessageResponse"]>(`v1/${name}/messages`, body);
      status.show(r.route?.target ? `Sent to ${r.route.target}.` : "Sent.");
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  const ctx: EventContext = { reply: (t, id) => void send(t, id) };
  const form = h("form", { class: "composer", "aria-label": "Send a message" }, field("Message", text), h("button", { type: "submit" }, "Send"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const msg = text.value.trim();
    if (!msg) return;
    text.value = "";
    void send(msg);
  });
  text.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  const head = title("Chat", h("a", { href: `#/plans/${name}` }, "Plans of this session"));
  main.replaceChildren(head, h("section", { class: "chat" }, log, form, status));
  void get<Schemas["v1GetSessionResponse"]>(`v1/${name}`).then((r) => {
    head.querySelector("h1")!.textContent = r.session?.displayName || "Chat";
  }).catch((err) => status.show(errorText(err), "error"));
  const seen = new Set<string>();
  const stream = streamEvents(
    name,
    (e) => {
      if (e.sequence && seen.has(e.sequence)) return;
      if (e.sequence) seen.add(e.sequence);
      const stick = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
      log.append(h("li", {}, render(e, ctx)));
      if (stick) log.scrollTop = log.scrollHeight;
    },
    (state, detail) => {
      if (state === "error") status.show(`Event stream: ${detail ?? "failed"}`, "error");
      if (state === "retrying") status.show("Event stream lost; reconnecting…");
    },
  );
  text.focus();
  return () => stream.close();
}

