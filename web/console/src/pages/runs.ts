// Runs: the list, and one run live: node states on its DAG, the Engineer's
// tool calls and what agents write as it happens, outputs, review
// findings, decisions, the diff and the delivered branch.
import { h, replace, short, when } from "../dom";
import { get, idOf, type Schemas } from "../api";
import { streamEvents, type SylkEvent } from "../stream";
import { render } from "../events/registry";
import { dagSVG } from "./dag";
import { diffLines } from "./plans";
import { errorText, poll, statusLine, title } from "./common";
import { receiptView, settlePanel } from "./settle";

type Run = Schemas["v1Run"];

const terminal = new Set(["RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED", "RUN_STATE_NO_CHANGES"]);

export function runs(main: HTMLElement): void {
  const status = statusLine();
  const list = h("ul", { class: "list", "aria-label": "Runs" });
  main.replaceChildren(title("Runs"), status, list);
  get<Schemas["v1ListRunsResponse"]>("v1/runs?pageSize=50")
    .then((r) => {
      const items = r.runs ?? [];
      if (!items.length) status.show("No runs yet: approve a plan to start one.");
      list.replaceChildren(
        ...items.map((x) => h("li", {}, h("a", { href: `#/run/${x.name}` }, idOf(x.name)), h("span", { class: "muted" }, ` ${short(x.state, "RUN_STATE_")} · ${when(x.createTime)}`))),
      );
    })
    .catch((err) => status.show(errorText(err), "error"));
}

export function run(main: HTMLElement, name: string): () => void {
  const status = statusLine();
  const summary = h("div", {});
  const feed = h("ol", { class: "events", "aria-label": "Live activity", tabindex: 0 });
  const details = h("div", {});
  main.replaceChildren(title(`Run ${idOf(name)}`), status, summary, h("h2", {}, "Live activity"), feed, details);
  let stream: { close(): void } | undefined;
  const stop = poll(async () => {
    try {
      const r = (await get<Schemas["v1GetRunResponse"]>(`v1/${name}`)).run ?? {};
      drawSummary(summary, r);
      if (!stream && r.sessionId) stream = follow(`sessions/${r.sessionId}`, r, feed);
      if (r.state && terminal.has(r.state)) {
        await drawDetails(details, r);
        return true;
      }
    } catch (err) {
      status.show(errorText(err), "error");
    }
    return false;
  }, 1000);
  return () => {
    stop();
    stream?.close();
  };
}

// follow shows the session's events that belong to this run.
function follow(session: string, r: Run, feed: HTMLElement): { close(): void } {
  const mine = (e: SylkEvent) => {
    const of = e.toolCall?.run ?? e.node?.run ?? e.agent?.run ?? e.review?.run ?? e.run?.run ?? e.plan?.run;
    return !!of && (of === r.name || of === r.id || idOf(of) === r.id);
  };
  return streamEvents(
    session,
    (e) => {
      if (mine(e)) feed.append(h("li", {}, render(e, { reply: () => undefined })));
    },
    () => undefined,
  );
}

function drawSummary(el: HTMLElement, r: Run): void {
  const state = short(r.state, "RUN_STATE_");
  const states: Record<string, string | undefined> = {};
  for (const n of r.nodes ?? []) states[n.nodeId ?? ""] = n.state;
  el.replaceChildren(
    h("p", {}, "State: ", h("strong", { class: `state ${state.replace(/ /g, "-")}`, "data-testid": "run-state" }, state), r.startTime ? ` · started ${when(r.startTime)}` : "", r.endTime ? ` · ended ${when(r.endTime)}` : ""),
    h("figure", { class: "dag-wrap", tabindex: 0 }, dagSVG(r.dag?.nodes ?? [], states), h("figcaption", {}, "Steps and their states")),
    h(
      "table",
      { class: "nodes" },
      h("caption", {}, "Steps"),
      h("thead", {}, h("tr", {}, ["Step", "State", "Attempt", "Time", "Error"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, (r.nodes ?? []).map((n) => h("tr", {}, h("td", {}, n.nodeId ?? ""), h("td", {}, short(n.state, "NODE_STATE_")), h("td", {}, String(n.attempt ?? "")), h("td", {}, n.duration ?? ""), h("td", {}, n.error ?? "")))),
    ),
  );
}

async function drawDetails(el: HTMLElement, r: Run, receipt?: Schemas["v1SettleReceipt"]): Promise<void> {
  const d = r.delivery;
  const outputs = (r.nodes ?? []).filter((n) => n.stdout || n.stderr || n.report);
  let decisions = "";
  try {
    decisions = (await get<Schemas["v1ListDecisionsResponse"]>(`v1/${r.name}/decisions`)).log ?? "";
  } catch {
    decisions = "";
  }
  const settled = (next: Run, rc: Schemas["v1SettleReceipt"]) => {
    // A retry runs the failed steps again: the page follows the run anew.
    if (rc.action === "SETTLE_ACTION_RETRY") window.dispatchEvent(new HashChangeEvent("hashchange"));
    else void drawDetails(el, next, rc);
  };
  replace(
    el,
    receipt ? receiptView(receipt) : null,
    settlePanel(r, settled),
    d ? h("section", { "aria-label": "Delivery" }, h("h2", {}, "Delivery"),
      d.branch ? h("p", {}, "Branch ", h("code", { "data-testid": "branch" }, d.branch), d.commit ? ` at ${d.commit.slice(0, 12)}` : "") : null,
      d.filesChanged?.length ? h("p", {}, `Files: ${d.filesChanged.join(", ")}`) : null,
      d.tests ? h("p", {}, `Tests: ${d.tests}`) : null,
      d.findings ? h("details", {}, h("summary", {}, "Review findings"), h("pre", {}, d.findings)) : null,
      d.detail ? h("p", {}, d.detail) : null) : null,
    r.resultPatch ? h("section", { "aria-label": "Diff" }, h("h2", {}, "Diff"), h("pre", { class: "diff" }, diffLines(r.resultPatch))) : null,
    outputs.length ? h("section", { "aria-label": "Outputs" }, h("h2", {}, "Outputs"), outputs.map((n) =>
      h("details", {}, h("summary", {}, n.nodeId ?? ""), n.report?.implemented ? h("p", {}, n.report.implemented) : null, n.stdout ? h("pre", {}, n.stdout) : null, n.stderr ? h("pre", {}, n.stderr) : null))) : null,
    decisions ? h("section", { "aria-label": "Decisions" }, h("h2", {}, "Decisions"), h("pre", { class: "log" }, decisions)) : null,
  );
}
