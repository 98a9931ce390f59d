// The browser side of bench/web_page.py: the panel page (/api/agent/ui/) against the Gradio
// Blocks page (/api/agent/gradio/) in the same Chromium, same agent:
//   - bytes: every script and stylesheet each page loads (until 1.5 s after it is
//     interactive), raw and gzip (zlib level 6, nginx's usual), from the responses
//     themselves;
//   - time to interactive: from navigation start to the message box enabled and the page
//     connected (panel: its status «Подключено»; Gradio: its textarea enabled), timed inside the
//     page; a fresh context (empty cache) per load, alternating pages, RUNS loads each;
//   - main-thread time while a 200-token answer streams at 30 tokens/s: Chromium's
//     Performance.getMetrics TaskDuration (all main-thread tasks, in thread CPU time) around
//     one streamed answer,
//     over the stream's duration (click to the end of the run), both pages, STREAMS each.
// Prints one JSON object. Run by bench/web_page.py, which starts the system.
import { createRequire } from "node:module";
import { gzipSync } from "node:zlib";

const require = createRequire(new URL("../tests/js/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const AGENT = process.env.AGENT_URL;
const TOKEN = process.env.TOKEN_ALICE;
const RUNS = Number(process.env.RUNS ?? 5);
const STREAMS = Number(process.env.STREAMS ?? 3);
const PROMPT = process.env.PROMPT ?? "echo 200 words";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const WAIT = { timeout: 60_000 };

// Per page: where it is, when it counts as interactive (checked inside the page), and how
// one turn is sent and seen to end.
const PAGES = {
  panel: {
    url: `${AGENT}/api/agent/ui/`,
    ready: () => {
      const box = document.querySelector('textarea[aria-label="Сообщение"], [aria-label="Сообщение"]');
      const ok = [...document.querySelectorAll('[role="status"]')]
        .some((s) => (s.getAttribute("aria-label") ?? s.textContent).trim() === "Подключено");
      return !!box && !box.disabled && ok;
    },
    async send(page, text) {
      await page.getByRole("textbox", { name: "Сообщение" }).fill(text);
      await page.getByRole("button", { name: "Отправить", exact: true }).click();
    },
    // Checked on DOM changes only: polling from the test would add main-thread work.
    ended: () => {
      const log = document.querySelector('[role="log"]');
      const words = [...document.querySelectorAll("article")].at(-1)?.textContent ?? "";
      return log?.getAttribute("aria-busy") === "false" && /w199/.test(words);
    },
  },
  gradio: {
    url: `${AGENT}/api/agent/gradio/`,
    ready: () => {
      const box = document.querySelector("#agentchat-input textarea");
      return !!box && !box.disabled && !!document.querySelector("#agentchat-send");
    },
    async send(page, text) {
      await page.locator("#agentchat-input textarea").fill(text);
      await page.locator("#agentchat-send").click();
    },
    // The run is over when the chatbot's status tracker hides again.
    ended: () => {
      const bots = document.querySelectorAll('#agentchat-chatbot [data-testid="bot"]');
      const last = bots.length ? bots[bots.length - 1].innerText : "";
      const tracker = document.querySelector("#agentchat-chatbot [data-testid=status-tracker]");
      return /w199/.test(last) && !!tracker && tracker.classList.contains("hide");
    },
  },
};

// Resolves when `ended` holds, checked on each DOM change (no polling from outside).
function whenEnded(endedSource) {
  const ended = new Function(`return (${endedSource})();`);
  return new Promise((resolve) => {
    const obs = new MutationObserver(() => {
      if (ended()) { obs.disconnect(); resolve(performance.now()); }
    });
    obs.observe(document.body, { subtree: true, childList: true, characterData: true,
                                 attributes: true });
  });
}

// Records performance.now() at the first moment `ready` holds (checked on every DOM change).
function interactiveProbe(readySource) {
  const ready = new Function(`return (${readySource})();`);
  const check = () => {
    if (window.__tti === undefined && ready()) window.__tti = performance.now();
  };
  new MutationObserver(check).observe(document, { subtree: true, childList: true,
                                                  attributes: true });
  setInterval(check, 20);
}

async function load(browser, name) {
  const spec = PAGES[name];
  const context = await browser.newContext({ locale: "ru-RU", viewport: { width: 1000, height: 900 } });
  const page = await context.newPage();
  const assets = [];
  page.on("response", (resp) => {
    const type = resp.request().resourceType();
    if (type === "script" || type === "stylesheet") assets.push({ type, resp });
  });
  await page.addInitScript(interactiveProbe, spec.ready.toString());
  await page.goto(spec.url);
  await page.waitForFunction(() => window.__tti !== undefined, null, WAIT);
  const tti = await page.evaluate(() => window.__tti);
  // Whatever loads just after (lazy chunks); not "networkidle": both pages keep a connection.
  await page.waitForTimeout(1500);
  const bytes = { js: 0, css: 0, js_gzip: 0, css_gzip: 0, files: 0 };
  for (const { type, resp } of assets) {
    const body = await resp.body().catch(() => null);
    if (!body) continue;
    const key = type === "script" ? "js" : "css";
    bytes[key] += body.length;
    bytes[`${key}_gzip`] += gzipSync(body, { level: 6 }).length;
    bytes.files += 1;
  }
  return { context, page, tti, bytes };
}

async function taskSeconds(cdp) {
  const { metrics } = await cdp.send("Performance.getMetrics");
  return metrics.find((m) => m.name === "TaskDuration").value;
}

// One streamed answer: main-thread task time over the stream's wall time.
async function stream(browser, name) {
  const { context, page } = await load(browser, name);
  if (name === "gradio") await page.locator("#agentchat-chatbot").waitFor(WAIT);
  const cdp = await context.newCDPSession(page);
  // Thread ticks: the main thread's own CPU time, so a loaded machine (other stacks on the
  // same 2 cores) does not count time the thread waited for a core.
  await cdp.send("Performance.enable", { timeDomain: "threadTicks" });
  const ended = page.evaluate(whenEnded, PAGES[name].ended.toString());
  const before = await taskSeconds(cdp);
  const t0 = Date.now();
  await PAGES[name].send(page, PROMPT);
  await ended;
  const wall = (Date.now() - t0) / 1000;
  const busy = (await taskSeconds(cdp)) - before;
  await context.close();
  return { stream_s: Number(wall.toFixed(2)), main_thread_s: Number(busy.toFixed(3)),
           main_thread_share: Number((busy / wall).toFixed(4)) };
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS, headless: true,
});
try {
  const loads = { panel: [], gradio: [] };
  for (let i = 0; i < RUNS + 1; i++) {
    for (const name of i % 2 ? ["gradio", "panel"] : ["panel", "gradio"]) {
      const { context, tti, bytes } = await load(browser, name);
      await context.close();
      if (i > 0) loads[name].push({ tti, bytes }); // the first pair warms the server up
    }
  }
  const out = {};
  for (const name of ["panel", "gradio"]) {
    out[name] = { tti_ms: Math.round(median(loads[name].map((l) => l.tti))),
                  tti_ms_all: loads[name].map((l) => Math.round(l.tti)),
                  bytes: loads[name].at(-1).bytes };
  }
  // STREAMS answers per page, alternating; the median by main-thread share (noisy when
  // neighbours load the machine).
  const streams = { panel: [], gradio: [] };
  for (let i = 0; i < STREAMS; i++) {
    for (const name of i % 2 ? ["gradio", "panel"] : ["panel", "gradio"]) {
      streams[name].push(await stream(browser, name));
    }
  }
  for (const name of ["panel", "gradio"]) {
    const sorted = [...streams[name]].sort((a, b) => a.main_thread_share - b.main_thread_share);
    out[name].stream = { ...sorted[Math.floor(sorted.length / 2)],
                         main_thread_share_all: streams[name].map((s) => s.main_thread_share) };
  }
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
