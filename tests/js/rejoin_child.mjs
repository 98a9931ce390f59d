// A browser tab that dies: submits one message with the real @gradio/client and prints every
// event as a JSON line until its parent kills it (tests/js/rejoin.test.mjs).
import { chat, connect } from "./lib.mjs";

const [url, token, text] = process.argv.slice(2);
const client = await connect(token, url);
await chat(client, [text], {
  onEvent: (ev) => { process.stdout.write(JSON.stringify(ev) + "\n"); },
});
