// A tab that reconnects after its replica died (tests/system/test_takeover.py): joins a run
// with the real @gradio/client (`action: "join"`, its run_id and the last seq it saw) and
// prints every event as a JSON line until the run's last event.
import { chat, connect } from "./lib.mjs";

const [url, token, cid, runId, lastSeq] = process.argv.slice(2);
const client = await connect(token, url);
await chat(client, {
  message: { text: "", files: [], action: "join", conversation_id: cid, run_id: runId,
             last_seq: Number(lastSeq) },
}, { onEvent: (ev) => { process.stdout.write(JSON.stringify(ev) + "\n"); } });
process.exit(0);
