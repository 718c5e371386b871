// The console in a real Chromium against a running mesh: sign in, ask a
// code question and open the cited answer, draft and approve a plan and
// watch its run end, search, and fail to sign in with a wrong key; every
// page is checked with axe-core and must have no serious or critical
// violation. Screenshots go to SYLK_ARTIFACTS.
//
// Run by e2e/console_test.go (go test -run TestConsole ./e2e/), which starts
// the mesh and passes SYLK_URL (the gateway), SYLK_KEY (an admin key),
// SYLK_ARTIFACTS and SYLK_CHROMIUM.
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
