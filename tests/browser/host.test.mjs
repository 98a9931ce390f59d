// The library (@agentchat/panel, web/dist) inside a minimal host app (tests/browser/host/, built
// with Vite by test_panel.py): served from its own origin with the agent's /api paths behind
// it (as the ss-tools app sits behind one ingress), given a token by the host, it drives one
// turn. The panel keeps no token: nothing in the tab's storage holds it.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createReadStream, existsSync, statSync } from "node:fs";
import http from "node:http";
import { extname, join, normalize } from "node:path";
import { WAIT, checkState, env, launch, openPage, sleep } from "./lib.mjs";

const AGENT = new URL(env("AGENT_URL"));
const BUILD = env("HOST_BUILD");
const TOKEN = env("TOKEN_ALICE");
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                ".svg": "image/svg+xml" };

let server;
let browser;

before(async () => {
  server = http.createServer((req, res) => {
    if (req.url.startsWith("/api/")) {
      // The agent behind the host's origin; streams pass through as they come.
      const up = http.request({ host: AGENT.hostname, port: AGENT.port, path: req.url,
                                method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      });
      up.on("error", () => res.destroy());
      req.pipe(up);
      return;
    }
    const path = normalize(join(BUILD, req.url.split("?")[0] === "/" ? "index.html"
                                                                      : req.url.split("?")[0]));
    if (!path.startsWith(BUILD) || !existsSync(path) || !statSync(path).isFile()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" });
    createReadStream(path).pipe(res);
  });
  await new Promise((r) => server.listen(Number(env("HOST_PORT")), "127.0.0.1", r));
  browser = await launch("ru-RU");
});

after(async () => {
  await browser?.close();
  server?.close();
});

test("a host app imports the panel and drives one turn with its own token", async () => {
  await browser.addInitScript((t) => { window.__HOST_TOKEN = t; }, TOKEN);
  const page = await openPage(browser, `http://127.0.0.1:${env("HOST_PORT")}/`, { clock: false });
  await page.getByRole("heading", { name: "Host app" }).waitFor(WAIT);
  const panel = page.getByRole("region", { name: "AgentChat" });
  await panel.waitFor(WAIT);
  await panel.getByRole("status", { name: "Подключено", exact: true }).waitFor(WAIT);
  await panel.getByRole("textbox", { name: "Сообщение" }).fill("найди дашборды про энергопотребление");
  await panel.getByRole("button", { name: "Отправить", exact: true }).click();
  const answer = panel.getByRole("article", { name: "Ассистент" }).last();
  await panel.getByRole("group", { name: "Инструмент: Поиск дашбордов" })
    .getByRole("img", { name: "Готово" }).waitFor(WAIT);
  const deadline = Date.now() + WAIT.timeout;
  while (!/энергопотреблени/i.test(await answer.innerText()) ||
         (await panel.getByRole("log").getAttribute("aria-busy")) === "true") {
    assert.ok(Date.now() < deadline, "the answer arrives and the stream ends");
    await sleep(100);
  }
  await checkState(page, "host-01-one-turn");
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage, ...sessionStorage }));
  assert.ok(!stored.includes(TOKEN.split(".")[2]), "the panel stores no token");
  await page.close();
});
