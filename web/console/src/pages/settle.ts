// Settling a failed or cancelled run's partial work: keep the succeeded
// steps' changes, roll them back, or retry the failed steps; the run
// suggests one by the failure's error tier.
import { h, short } from "../dom";
import { post, type Schemas } from "../api";
import { errorText, statusLine } from "./common";

type Run = Schemas["v1Run"];

const actions: [Schemas["v1SettleAction"], string][] = [
  ["SETTLE_ACTION_KEEP", "Keep"],
  ["SETTLE_ACTION_ROLLBACK", "Roll back"],
  ["SETTLE_ACTION_RETRY", "Retry"],
];

// settlePanel offers the choices of a run with a partial failure; settled
// gets the run as it is after one is taken, and its receipt.
export function settlePanel(r: Run, settled: (run: Run, receipt: Schemas["v1SettleReceipt"]) => void): HTMLElement | null {
  const pf = r.partialFailure;
  if (!pf) return null;
  const status = statusLine();
  const take = async (action: Schemas["v1SettleAction"]) => {
    status.show("Settling…");
    try {
      const resp = await post<Schemas["v1SettleRunResponse"]>(`v1/${r.name}:settle`, { action });
      settled(resp.run ?? r, resp.receipt ?? {});
    } catch (err) {
      status.show(errorText(err), "error");
    }
  };
  return h(
    "section",
    { "aria-label": "Settle" },
    h("h2", {}, "Settle the partial work"),
    h("p", {}, `Failed steps: ${(pf.failedNodes ?? []).join(", ")}${pf.errorTier ? ` (${pf.errorTier})` : ""}. Suggested: `, h("strong", {}, short(pf.defaultAction, "SETTLE_ACTION_")), "."),
    h("p", {}, actions.flatMap(([a, label]) => [h("button", { type: "button", class: a === pf.defaultAction ? "primary" : null, onclick: () => void take(a) }, label), " "])),
    status,
  );
}

// receiptView says what a settle did.
export function receiptView(rc: Schemas["v1SettleReceipt"]): HTMLElement {
  const parts: [string, string[] | undefined][] = [
    ["Kept", rc.keptNodes],
    ["Discarded", rc.discardedNodes],
    ["Unfinished", rc.unfinishedNodes],
    ["Retried", rc.retriedNodes],
    ["Conflicts", rc.conflicts],
  ];
  return h(
    "section",
    { "aria-label": "Receipt", "data-testid": "settle-receipt" },
    h("h2", {}, `Settled: ${short(rc.action, "SETTLE_ACTION_")}`),
    h("ul", {}, parts.filter(([, v]) => v?.length).map(([k, v]) => h("li", {}, `${k}: ${v!.join(", ")}`)), rc.filesChanged ? h("li", {}, `Files changed: ${rc.filesChanged}`) : null),
    rc.note ? h("p", {}, rc.note) : null,
  );
}
