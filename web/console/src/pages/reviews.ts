// Reviews: have a registered repository's base...head, or a patch,
// reviewed with a persona, and read the findings.
import { h, short, when } from "../dom";
import { get, post, type Schemas } from "../api";
import { statusLine, title } from "./common";
import { actionForm, listOf } from "./forms";

type Review = Schemas["v1ReviewRequest"];

const personas: [string, string][] = ["default", "security", "dx", "architecture", "quick"].map((p) => [p, p]);

export function reviews(main: HTMLElement): void {
  const status = statusLine();
  const list = h("ul", { class: "list reviews", "aria-label": "Reviews" });
  const load = async () => {
    const r = await get<Schemas["v1ListReviewsResponse"]>("v1/reviews?pageSize=50");
    listOf(list, r.reviews, (x) => h("li", {}, reviewView(x)), "No reviews yet.");
  };
  const create = actionForm(
    "Request a review",
    [
      { name: "repository", label: "Repository", placeholder: "repositories/<id> or its name" },
      { name: "baseRef", label: "Base", placeholder: "main" },
      { name: "headRef", label: "Head", placeholder: "a branch" },
      { name: "patch", label: "Or a patch", kind: "textarea", placeholder: "a unified diff" },
      { name: "persona", label: "Persona", kind: "select", options: personas, value: "default" },
    ],
    "Review",
    status,
    async (v) => {
      const body: Review = { persona: v.persona };
      if (v.patch) body.patch = v.patch + "\n";
      else Object.assign(body, { repository: v.repository, baseRef: v.baseRef, headRef: v.headRef });
      const r = await post<Schemas["v1CreateReviewResponse"]>("v1/reviews?waitSeconds=120", body);
      await load();
      return `Review ${short(r.review?.state, "REVIEW_STATE_")}.`;
    },
  );
  main.replaceChildren(title("Reviews"), create, status, h("h2", {}, "Your reviews"), list);
  void load().catch(() => undefined);
}

// reviewView is one review: what was reviewed, its state and findings.
export function reviewView(x: Review): HTMLElement {
  const rv = x.review;
  const subject = x.repository ? `${x.repository} ${x.baseRef ?? ""}...${x.headRef ?? ""}` : "a patch";
  return h(
    "article",
    { class: "review", "aria-label": `Review of ${subject}` },
    h("p", {}, h("strong", { "data-testid": "review-state" }, short(x.state, "REVIEW_STATE_")), ` · ${subject} · ${rv?.persona || x.persona || "default"} · ${when(x.createTime)}`),
    x.error ? h("p", { class: "status error" }, x.error) : null,
    rv ? h("p", {}, `Outcome: ${short(rv.outcome, "REVIEW_OUTCOME_")}`, rv.summary ? ` — ${rv.summary}` : "") : null,
    rv?.findings?.length
      ? h("ul", { class: "findings" }, rv.findings.map((f) => h("li", {}, h("strong", {}, short(f.severity, "SEVERITY_") + (f.blocking ? ", blocking" : "")), ` ${f.file ?? ""}${f.line ? ":" + f.line : ""}: ${f.message ?? ""}`, f.suggestion ? h("p", { class: "muted" }, `Suggestion: ${f.suggestion}`) : null)))
      : null,
  );
}
