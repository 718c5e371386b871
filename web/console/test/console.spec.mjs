// The console in a real Chromium against a running mesh: sign in, ask a
// code question and open the cited answer, draft and approve a plan and
// watch its run end, search, and fail to sign in with a wrong key; every
// page is checked with axe-core and must have no serious or critical
// violation. Screenshots go to SYLK_ARTIFACTS.
//
// Run by e2e/console_test.go (go test -run TestConsole ./e2e/), which starts
// the mesh and passes SYLK_URL (the gateway), SYLK_KEY (an admin key),
// SYLK_ARTIFACTS, SYLK_CHROMIUM, SYLK_REPO_PATH (a directory to register) and
// SYLK_SETTLE_REPO (a registered git repository for a run to settle).
import { chromium } from "playwright-core";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const base = need("SYLK_URL");
const key = need("SYLK_KEY");
const shots = process.env.SYLK_ARTIFACTS || "screenshots";
const question = "where is the function ComputeInvoiceTotal defined in the code?";
const axePath = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

function log(msg) {
  console.log(`[console] ${msg}`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

// accessible runs axe-core on the page and fails on serious or critical
// violations (the rest are logged).
async function accessible(page, name) {
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  for (const v of violations) log(`axe ${name}: ${v.impact} ${v.id}: ${v.help} at ${v.nodes.join(", ")}`);
  const bad = violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (bad.length) throw new Error(`${name}: ${bad.length} serious or critical accessibility violations: ${bad.map((v) => v.id).join(", ")}`);
}

async function check(page, name) {
  await shot(page, name);
  await accessible(page, name);
  log(`${name}: ok`);
}

async function signIn(page, apiKey) {
  await page.getByLabel("API key", { exact: true }).fill(apiKey);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function chat(page) {
  await page.getByRole("link", { name: "Sessions" }).click();
  await page.getByLabel("Name", { exact: true }).fill("console test");
  await page.getByRole("button", { name: "New session" }).click();
  await page.getByLabel("Message", { exact: true }).fill(question);
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator(".kind-routed", { hasText: "librarian" }).first().waitFor({ timeout: 60_000 });
  const answer = page.locator("article.kind-answer", { hasText: "billing/invoice.go" }).first();
  await answer.waitFor({ timeout: 90_000 });
  const source = answer.locator(".citation summary", { hasText: "billing/invoice.go" }).first();
  await source.click();
  await answer.locator(".citation[open] pre, .citation[open] p").first().waitFor();
  await check(page, "02-chat-cited-answer");

  // A question that names nothing: the librarian asks, with options as
  // buttons; one click answers it and the librarian answers again.
  await page.getByLabel("Message", { exact: true }).fill("where is it?");
  await page.getByRole("button", { name: "Send" }).click();
  const asked = page.locator("article.kind-clarification").first();
  await asked.waitFor({ timeout: 60_000 });
  const fromLibrarian = page.locator("article.card", { has: page.locator(".source", { hasText: /^librarian$/ }) });
  const before = await fromLibrarian.count();
  await asked.getByRole("button").first().click();
  await page.waitForFunction(
    (n) => [...document.querySelectorAll("article.card .source")].filter((e) => e.textContent === "librarian").length > n,
    before,
    { timeout: 60_000 },
  );
  await check(page, "02b-chat-clarification");
}

async function planAndRun(page) {
  await page.getByRole("link", { name: "Plans of this session" }).click();
  await page.getByLabel("Request", { exact: true }).fill("add a /version endpoint to the gateway");
  await page.getByRole("button", { name: "Draft plan" }).click();
  const state = page.getByTestId("plan-state");
  await state.filter({ hasText: "awaiting approval" }).waitFor({ timeout: 90_000 });
  await page.locator("svg.dag .dag-node").first().waitFor();
  await check(page, "03-plan-drafted");
  // Revised once: a second version, listed with its diff.
  await page.getByLabel("Feedback", { exact: true }).fill("keep the change small");
  await page.getByRole("button", { name: "Revise" }).click();
  await page.locator("p", { has: state }).filter({ hasText: "version 2" }).waitFor({ timeout: 90_000 });
  await page.locator("details.version").nth(1).waitFor();
  await page.locator("details.version summary").nth(1).click();
  await check(page, "03b-plan-revised");
  await page.getByRole("button", { name: "Approve" }).click();
  await state.filter({ hasText: /^approved$/ }).waitFor({ timeout: 30_000 });
  await page.getByRole("link", { name: "Watch the run" }).click();
  const run = page.getByTestId("run-state");
  await run.filter({ hasText: /succeeded|no changes|failed|cancelled/ }).waitFor({ timeout: 180_000 });
  const end = await run.textContent();
  log(`run ended: ${end}`);
  if (!/succeeded|no changes/.test(end ?? "")) throw new Error(`the run ended ${end}`);
  await check(page, "04-run-ended");
}

async function search(page) {
  await page.getByRole("link", { name: "Search" }).click();
  await page.getByLabel("Query", { exact: true }).fill("ComputeInvoiceTotal");
  await page.getByLabel("Mode", { exact: true }).selectOption("SEARCH_MODE_LEXICAL");
  await page.getByRole("button", { name: "Search", exact: true }).click();
  await page.locator(".hit", { hasText: "billing/invoice.go" }).first().waitFor({ timeout: 30_000 });
  await check(page, "05-search");
}

async function otherPages(page) {
  await page.getByRole("link", { name: "Repositories" }).click();
  await page.locator("li[data-repository]", { hasText: "ready" }).first().waitFor({ timeout: 30_000 });
  // A second repository, registered here and indexed in the background:
  // the list shows it ready once its index operation is done.
  await page.getByLabel("Path or URL", { exact: true }).fill(need("SYLK_REPO_PATH"));
  await page.getByLabel("Name", { exact: true }).fill("second");
  await page.getByRole("button", { name: "Register and index" }).click();
  await page.locator("li[data-repository]", { hasText: "second" }).filter({ hasText: "ready" }).waitFor({ timeout: 90_000 });
  await check(page, "06-repositories");
  await page.getByRole("link", { name: "Runs" }).click();
  await page.locator(".list li").first().waitFor();
  await check(page, "07-runs");
  await page.getByRole("link", { name: "Usage" }).click();
  await page.locator("table.usage, .status.error").first().waitFor();
  await check(page, "08-usage");
  await page.getByRole("link", { name: "API keys" }).click();
  await page.locator("table.keys tbody tr").first().waitFor();
  // Create a key, then rotate it: the new key is shown once and the old
  // one is listed as rotating (it works for its grace period).
  await page.getByLabel("User", { exact: true }).fill("console-user");
  await page.getByLabel("Description", { exact: true }).fill("rotated by the console test");
  await page.getByRole("button", { name: "Create key" }).click();
  const created = page.locator("tr", { hasText: "rotated by the console test" }).filter({ hasText: "active" });
  await created.waitFor();
  await created.getByRole("button", { name: /^Rotate key/ }).click();
  await page.getByText("the old one works for another hour").waitFor();
  await page.locator("tr", { hasText: "rotated by the console test" }).filter({ hasText: "rotating" }).waitFor();
  await check(page, "09-keys");
}

// api calls the REST API directly, for what the test sets up outside the
// console (a failed run, a member's key).
async function api(method, path, body) {
  const resp = await fetch(`${base}/${path}`, {
    method,
    headers: { "X-API-Key": key, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

// knowledge ingests a document and searches it, records a history entry
// and finds it, and has a patch reviewed.
async function knowledge(page) {
  await page.getByRole("link", { name: "Documents" }).click();
  await page.getByLabel("Title", { exact: true }).fill("Style");
  await page.getByLabel("Markdown", { exact: true }).fill("# Errors\nWrap them with context.\n");
  await page.getByRole("button", { name: "Add document" }).click();
  await page.getByRole("status").filter({ hasText: 'Added "Style"' }).waitFor();
  await page.getByLabel("Query", { exact: true }).fill("wrap errors");
  await page.getByRole("button", { name: "Search", exact: true }).click();
  await page.locator(".hit", { hasText: "Style › Errors" }).first().waitFor();
  await check(page, "11-documents");

  await page.getByRole("link", { name: "History" }).click();
  await page.getByLabel("Title", { exact: true }).fill("Use PostgreSQL for the store");
  await page.getByLabel("Content", { exact: true }).fill("it has the JSON we need");
  await page.getByRole("button", { name: "Record" }).click();
  await page.locator("ul[aria-label='Newest entries'] li", { hasText: "Use PostgreSQL for the store" }).waitFor();
  await page.getByLabel("Query", { exact: true }).fill("postgresql");
  await page.getByRole("button", { name: "Search", exact: true }).click();
  await page.locator("ol .hit", { hasText: "Use PostgreSQL for the store" }).first().waitFor();
  await check(page, "12-history");

  // A patch of generated files alone is reviewed without a model.
  await page.getByRole("link", { name: "Reviews" }).click();
  await page.getByLabel("Or a patch", { exact: true }).fill("diff --git a/gen/api.pb.go b/gen/api.pb.go\n--- a/gen/api.pb.go\n+++ b/gen/api.pb.go\n@@ -1 +1 @@\n-package api\n+package api // v2");
  await page.getByRole("button", { name: "Review", exact: true }).click();
  await page.locator("article.review", { hasText: "all files excluded" }).first().waitFor({ timeout: 150_000 });
  await check(page, "13-reviews");
}

// settle opens a failed repository run and keeps its partial work.
async function settle(page) {
  const run = await api("POST", "v1/runs", {
    repository: need("SYLK_SETTLE_REPO"),
    dag: { nodes: [{ id: "doc", edits: [{ path: "NOTES.md", content: "partial\n" }] }, { id: "bad", command: "exit 4" }] },
  });
  await page.goto(`${base}/#/run/${run.run.name}`);
  await page.getByTestId("run-state").filter({ hasText: "failed" }).waitFor({ timeout: 120_000 });
  await page.getByRole("region", { name: "Settle" }).waitFor();
  await page.getByRole("button", { name: "Keep", exact: true }).click();
  await page.getByTestId("settle-receipt").filter({ hasText: "Kept: doc" }).waitFor();
  await page.getByRole("region", { name: "Diff" }).filter({ hasText: "+partial" }).waitFor();
  await check(page, "14-settle");
}

// admin reads the providers and the audit log, and checks its chain.
async function admin(page) {
  await page.getByRole("link", { name: "Providers" }).click();
  await page.locator("ul[aria-label='Providers'] li", { hasText: "local" }).filter({ hasText: "default" }).waitFor();
  await check(page, "16-providers");
  await page.getByRole("link", { name: "Audit log" }).click();
  await page.locator("ol.audit li", { hasText: "api_key.created" }).first().waitFor();
  await page.getByRole("button", { name: "Verify the chain" }).click();
  await page.getByRole("status").filter({ hasText: "Intact" }).waitFor();
  await check(page, "17-audit");
}

// member signs in with a member's key: the API keys link is an admin's.
async function member(page) {
  const created = await api("POST", "v1/keys", { userId: "console-member", role: "member", description: "console member" });
  await page.getByRole("button", { name: "Sign out" }).click();
  await signIn(page, created.key);
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  await page.getByRole("link", { name: "Documents" }).waitFor();
  for (const link of ["API keys", "Audit log"]) {
    if (await page.getByRole("link", { name: link }).count()) throw new Error(`a member sees the ${link} link`);
  }
  await check(page, "15-member");
  await page.getByRole("button", { name: "Sign out" }).click();
  await signIn(page, key);
  await page.getByRole("link", { name: "API keys" }).waitFor();
}

async function wrongKey(page) {
  await page.getByRole("button", { name: "Sign out" }).click();
  await signIn(page, "sylk_this-key-does-not-exist");
  await page.getByRole("alert").filter({ hasText: "invalid API key" }).waitFor({ timeout: 15_000 });
  await check(page, "10-wrong-key");
}

async function main() {
  mkdirSync(shots, { recursive: true });
  rmSync(join(shots, "failure.png"), { force: true });
  const profile = mkdtempSync(join(tmpdir(), "sylk-console-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.SYLK_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  const problems = [];
  try {
    // axe-core is injected by the browser itself, as the console's CSP
    // (rightly) refuses inline scripts.
    await context.addInitScript({ path: axePath });
    const page = context.pages()[0] ?? (await context.newPage());
    page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
    page.on("console", (m) => {
      if (m.type() === "error" && !/401|Unauthorized/.test(m.text())) problems.push(`console error: ${m.text()}`);
    });
    page.setDefaultTimeout(30_000);
    await page.goto(base + "/");
    await page.getByLabel("API key", { exact: true }).waitFor();
    await check(page, "01-sign-in");
    await signIn(page, key);
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    await chat(page);
    await planAndRun(page);
    await search(page);
    await otherPages(page);
    await knowledge(page);
    await settle(page);
    await admin(page);
    await member(page);
    await wrongKey(page);
  } catch (err) {
    const page = context.pages()[0];
    if (page) await shot(page, "failure").catch(() => undefined);
    throw err;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join("\n")}`);
  log("all steps passed");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
