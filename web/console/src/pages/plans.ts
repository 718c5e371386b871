// Plans: a session's plans and a form to draft one; a plan with its DAG,
// its versions and their diffs, and approve / reject / revise.
import { h, field, replace, short, when } from "../dom";
import { get, post, idOf, type Schemas } from "../api";
import { dagSVG } from "./dag";
import { errorText, statusLine, title } from "./common";

type Plan = Schemas["v1Plan"];

export function plans(main: HTMLElement, session: string): void {
  const status = statusLine();
  const list = h("ul", { class: "list", "aria-label": "Plans" });
  const request = h("textarea", { name: "request", rows: 2, required: true, placeholder: "What should change?" });
  const form = h("form", { class: "inline", "aria-label": "Draft a plan" }, field("Request", request), h("button", { type: "submit" }, "Draft plan"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    status.show("The Architect is drafting…");
    try {
      const body: Schemas["PlanServiceCreatePlanBody"] = { request: request.value };
      const r = await post<Schemas["v1CreatePlanResponse"]>(`v1/${session}/plans`, body);
      location.hash = `#/plan/${r.plan?.name}`;
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  main.replaceChildren(title("Plans", h("a", { href: `#/chat/${session}` }, "Back to the chat")), form, status, list);
  get<Schemas["v1ListPlansResponse"]>(`v1/${session}/plans`)
    .then((r) => {
      const items = r.plans ?? [];
      if (!items.length) status.show("No plans in this session yet.");
      list.replaceChildren(
        ...items.map((p) =>
          h("li", {}, h("a", { href: `#/plan/${p.name}` }, p.title || idOf(p.name)), h("span", { class: "muted" }, ` v${p.version ?? 1} · ${short(p.state, "PLAN_STATE_")} · ${when(p.createTime)}`)),
        ),
      );
    })
    .catch((err) => status.show(errorText(err), "error"));
}

export function plan(main: HTMLElement, name: string): void {
  const status = statusLine();
  const body = h("div", {});
  main.replaceChildren(title("Plan"), status, body);
  const load = async () => {
    try {
      const r = await get<Schemas["v1GetPlanResponse"]>(`v1/${name}`);
      if (r.plan) draw(body, r.plan, status, load);
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  void load();
}

function draw(body: HTMLElement, p: Plan, status: ReturnType<typeof statusLine>, reload: () => Promise<void>): void {
  const state = short(p.state, "PLAN_STATE_");
  const heading = body.parentElement?.querySelector("h1");
  if (heading) heading.textContent = p.title || "Plan";
  replace(
    body,
    h("p", {}, h("span", { class: `state ${state.replace(/ /g, "-")}`, "data-testid": "plan-state" }, state), ` · version ${p.version ?? 1} · ${p.request ?? ""}`),
    p.sessionId ? h("p", {}, h("a", { href: `#/chat/sessions/${p.sessionId}` }, "Open the session's chat")) : null,
    h("figure", { class: "dag-wrap", tabindex: 0 }, dagSVG(p.dag?.nodes ?? []), h("figcaption", {}, "Steps, left to right in dependency order")),
    steps(p),
    p.state === "PLAN_STATE_AWAITING_APPROVAL" ? actions(p, status, reload) : null,
    p.run ? h("p", {}, h("a", { href: `#/run/${p.run}`, class: "button" }, "Watch the run")) : null,
    p.rejectReason ? h("p", {}, `Rejected: ${p.rejectReason}`) : null,
    versions(p),
  );
}

function steps(p: Plan): HTMLElement {
  return h(
    "ol",
    { class: "steps", "aria-label": "Steps" },
    (p.dag?.nodes ?? []).map((n) =>
      h("li", {}, h("strong", {}, n.name || n.id || ""), h("span", { class: "muted" }, ` (${n.role ?? ""}${n.dependsOn?.length ? ", after " + n.dependsOn.join(", ") : ""})`), n.prompt ? h("p", {}, n.prompt) : null),
    ),
  );
}

function actions(p: Plan, status: ReturnType<typeof statusLine>, reload: () => Promise<void>): HTMLElement {
  const text = h("input", { name: "feedback", placeholder: "Feedback for a revision, or a reason to reject" });
  const act = (verb: string, body: object) => async () => {
    status.show(`${verb}…`);
    try {
      await post(`v1/${p.name}:${verb}`, body);
      status.show(`Done: ${verb}.`);
      await reload();
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  const approve: Schemas["PlanServiceApprovePlanBody"] = {};
  return h(
    "div",
    { class: "actions", role: "group", "aria-label": "Decide" },
    h("button", { type: "button", onclick: act("approve", approve) }, "Approve"),
    field("Feedback", text),
    h("button", { type: "button", onclick: () => void act("revise", { feedback: text.value } satisfies Schemas["PlanServiceRevisePlanBody"])() }, "Revise"),
    h("button", { type: "button", class: "danger", onclick: () => void act("reject", { reason: text.value } satisfies Schemas["PlanServiceRejectPlanBody"])() }, "Reject"),
  );
}

function versions(p: Plan): HTMLElement | null {
  const vs = p.versions ?? [];
  if (vs.length < 2 && !vs.some((v) => v.diff)) return null;
  return h(
    "section",
    { "aria-label": "Versions" },
    h("h2", {}, "Versions"),
    vs.map((v) =>
      h(
        "details",
        { class: "version" },
        h("summary", {}, `Version ${v.version ?? "?"}: ${v.title ?? ""} (${when(v.createTime)})`),
        v.feedback ? h("p", {}, `Feedback: ${v.feedback}`) : null,
        v.diff ? h("pre", { class: "diff" }, diffLines(v.diff)) : h("p", { class: "muted" }, "The first version."),
      ),
    ),
  );
}

// diffLines marks added and removed lines for colour.
export function diffLines(diff: string): HTMLElement[] {
  return diff.split("\n").map((l) => h("span", { class: l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : "" }, l + "\n"));
}
