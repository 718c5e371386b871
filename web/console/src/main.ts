// The console: a hash-routed single page. Each page is a function that
// fills the main element and returns a cleanup (closing streams, timers).
import "./style.css";
import "./events/chat";
import "./events/work";
import { apiKey, learnRole, role, setApiKey } from "./api";
import { h, replace } from "./dom";
import { signIn } from "./pages/signin";
import { sessions, chat } from "./pages/sessions";
import { plans, plan } from "./pages/plans";
import { runs, run } from "./pages/runs";
import { search } from "./pages/search";
import { repositories } from "./pages/repositories";
import { usage } from "./pages/usage";
import { keys } from "./pages/keys";
import { documents } from "./pages/documents";
import { history } from "./pages/history";
import { reviews } from "./pages/reviews";
import { audit, providers } from "./pages/admin";

export type Page = (main: HTMLElement, arg: string, query: URLSearchParams) => (() => void) | void;

// routes maps the first segment of the hash to a page; the rest of the
// path is its argument (a resource name such as sessions/abc).
const routes: Record<string, Page> = {
  sessions,
  chat,
  plans,
  plan,
  runs,
  run,
  search,
  repositories,
  usage,
  keys,
  documents,
  history,
  reviews,
  providers,
  audit,
};

const nav: [string, string][] = [
  ["sessions", "Sessions"],
  ["runs", "Runs"],
  ["search", "Search"],
  ["repositories", "Repositories"],
  ["reviews", "Reviews"],
  ["documents", "Documents"],
  ["history", "History"],
  ["usage", "Usage"],
  ["providers", "Providers"],
  ["keys", "API keys"],
  ["audit", "Audit log"],
];

// adminOnly are the pages whose link only admins see.
const adminOnly = new Set(["keys", "audit"]);

let cleanup: (() => void) | void;

function route(): void {
  if (cleanup) cleanup();
  cleanup = undefined;
  const app = document.getElementById("app")!;
  const [path, qs] = location.hash.replace(/^#\/?/, "").split("?");
  const [head = "", ...rest] = (path ?? "").split("/");
  const main = h("main", { id: "main", tabindex: "-1" });
  if (!apiKey()) {
    replace(app, h("header", { class: "top" }, h("span", { class: "brand" }, "Sylk")), main);
    signIn(main, () => {
      location.hash = "#/sessions";
      route();
    });
    return;
  }
  if (role() === null) {
    // A tab signed in before the role was kept: learn it, then draw.
    void learnRole().then(route);
    return;
  }
  const page = routes[head] ?? sessions;
  const current = routes[head] ? head : "sessions";
  replace(
    app,
    h(
      "header",
      { class: "top" },
      h("span", { class: "brand" }, "Sylk"),
      h(
        "nav",
        { "aria-label": "Main" },
        h("ul", {}, nav.filter(([id]) => !adminOnly.has(id) || role() === "admin").map(([id, label]) => h("li", {}, h("a", { href: `#/${id}`, "aria-current": id === current ? "page" : null }, label)))),
      ),
      h("button", { type: "button", class: "link", onclick: signOut }, "Sign out"),
    ),
    main,
  );
  cleanup = page(main, rest.map(decodeURIComponent).join("/"), new URLSearchParams(qs ?? ""));
}

function signOut(): void {
  setApiKey(null);
  location.hash = "#/";
  route();
}

window.addEventListener("hashchange", route);
// A key that stops working (revoked, expired) sends the user back to sign in.
window.addEventListener("sylk:unauthenticated", () => {
  if (apiKey()) {
    setApiKey(null);
    route();
  }
});
route();
