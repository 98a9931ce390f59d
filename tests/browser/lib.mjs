// What the browser tests share: Chromium through playwright-core (from tests/js/node_modules),
// a TCP proxy the test can cut, axe-core, CSP violation records, screenshots, REST helpers.
// Run through pytest (tests/browser/test_panel.py), which starts the real stack and sets the
// environment read here.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
// The Node test client's install (make js): playwright-core and axe-core live there.
export const require = createRequire(join(HERE, "..", "js", "package.json"));
const { chromium } = require("playwright-core");
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run through pytest (tests/browser/test_panel.py)`);
  return v;
};
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const WAIT = { timeout: 30_000 }; // generous: the 2-core machine runs other stacks too

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"];
export const SHOTS = process.env.PAGE_SHOTS ?? mkdtempSync(join(tmpdir(), "agentchat-panel-"));

export async function launch(locale = "ru-RU") {
  mkdirSync(SHOTS, { recursive: true });
  // A persistent context is how playwright passes a fresh, empty --user-data-dir.
  return chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "agentchat-chromium-")), {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS, headless: true,
    viewport: { width: 1000, height: 900 }, locale,
  });
}

// Every page records what the page's CSP refused (and uncaught errors): a test asserts none.
export async function openPage(context, url, { clock = true } = {}) {
  const page = await context.newPage();
  page.problems = [];
  page.on("pageerror", (err) => page.problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => {
    if (/Content Security Policy|Refused to/i.test(msg.text())) page.problems.push(msg.text());
  });
  await page.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      (window.__csp ??= []).push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  // Playwright's clock: time flows as usual until a test jumps it (the 10 s arming, the
  // 5 s reconnect waits), so no product setting or internal is touched.
  if (clock) await page.clock.install();
  await page.goto(url);
  return page;
}

export async function noProblems(page) {
  const csp = await page.evaluate(() => window.__csp ?? []);
  assert.deepEqual([...page.problems, ...csp], [], "no CSP violation and no page error");
}

// axe-core in the page (evaluate runs outside the page's CSP; a script tag would be refused):
// no serious or critical violation in the state on screen.
export async function axe(page, state) {
  await page.evaluate(AXE);
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                                      nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  const bad = result.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(bad, [], `axe: serious or critical violations in state ${state}`);
  return result;
}

export async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

// One state checked the same way everywhere: screenshot, axe, CSP.
export async function checkState(page, name) {
  await shot(page, name);
  await axe(page, name);
  await noProblems(page);
}

// A TCP proxy in front of the agent, so a test can cut the page off mid-run (every open
// socket destroyed, new ones refused) and restore it, like a network that comes and goes.
// `silence()` is the other kind of loss: a proxy that drops the connection without a word (a
// laptop that sleeps): every open connection stays open and carries nothing, new ones are
// accepted and go nowhere, until `speak()`: then, as when a network comes back, the
// connections it held are reset (a peer that forgot them answers RST) and new ones go through.
export async function tcpProxy(target) {
  const { hostname, port } = new URL(target);
  const sockets = new Set();
  const pairs = new Set();
  const dead = new Set(); // held by the silence
  let silent = false;
  let server;
  let listenPort = 0;
  const listen = () => new Promise((resolve) => {
    server = net.createServer((client) => {
      if (silent) {
        sockets.add(client);
        dead.add(client);
        client.on("close", () => { sockets.delete(client); dead.delete(client); });
        client.on("error", () => client.destroy());
        client.pause();
        return;
      }
      const upstream = net.connect(Number(port), hostname);
      const pair = [client, upstream];
      pairs.add(pair);
      client.on("close", () => pairs.delete(pair));
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on("close", () => sockets.delete(s));
        s.on("error", () => { client.destroy(); upstream.destroy(); });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    server.listen(listenPort, "127.0.0.1", () => {
      listenPort = server.address().port;
      resolve();
    });
  });
  await listen();
  return {
    get url() { return `http://127.0.0.1:${listenPort}`; },
    async cut() {
      await new Promise((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
    },
    async restore() { await listen(); },
    silence() {
      silent = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
        dead.add(client);
        dead.add(upstream);
      }
      pairs.clear();
    },
    speak() {
      silent = false;
      for (const s of dead) {
        try { s.resetAndDestroy(); } catch { s.destroy(); }
      }
      dead.clear();
    },
    async close() { await this.cut(); },
  };
}

export async function rest(base, path, token, init = {}) {
  const resp = await fetch(base + path, {
    ...init,
    headers: { Authorization: `Bearer ${token}`, "content-type": "application/json",
               ...(init.headers ?? {}) },
  });
  return { status: resp.status, body: await resp.json().catch(() => null) };
}

export async function sandbox(path, body) {
  const resp = await fetch(env("SANDBOX_URL") + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

// --- the panel, by role and name (web/README.md, "Selectors for the browser tests") ----------
export const input = (p) => p.getByRole("textbox", { name: "Сообщение" });
export const sendBtn = (p) => p.getByRole("button", { name: "Отправить", exact: true });
export const stopBtn = (p) => p.getByRole("button", { name: "Остановить", exact: true });
export const log = (p) => p.getByRole("log", { name: "Сообщения" });
export const dot = (p, name) => p.getByRole("status", { name, exact: true });
export const assistant = (p) => p.getByRole("article", { name: "Ассистент" });
export const you = (p) => p.getByRole("article", { name: "Вы" });
export const words = (text) => text.trim().split(/\s+/).filter(Boolean).length;

export async function until(what, fn, timeout = WAIT.timeout) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}
