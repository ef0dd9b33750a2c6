// The Node SDK (@langchain/langgraph-sdk, unmodified) against our server: list assistants,
// create a thread, stream a run (messages-tuple and values), then cancel a slow run with
// wait=true. Prints one JSON object with what it saw; any error exits non-zero.
// Env: LG_URL (the protocol's base URL), LG_API_KEY (a DRF token), LG_SDK (the package's folder).
import { pathToFileURL } from "node:url";
import path from "node:path";

const { Client } = await import(pathToFileURL(path.join(process.env.LG_SDK, "dist", "index.js")).href);
const client = new Client({ apiUrl: process.env.LG_URL, apiKey: process.env.LG_API_KEY });
const input = (text) => ({ messages: [{ role: "user", content: text }] });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const assistants = await client.assistants.search();
const thread = await client.threads.create({ metadata: { from: "node" } });
const events = [];
const chunks = [];
let lastValues = null;
for await (const part of client.runs.stream(thread.thread_id, "helper", {
  input: input("hello from node"),
  streamMode: ["messages-tuple", "values"],
  context: { script: [{ content: "Hello from the other side of the protocol.", delay: 0.5 }] },
})) {
  events.push(part.event);
  if (part.event === "messages") chunks.push(part.data[0].content);
  if (part.event === "values") lastValues = part.data;
}

const slow = await client.runs.create(thread.thread_id, "helper", {
  input: input("take your time"),
  context: { script: [{ content: "word ".repeat(400), delay: 30 }] },
});
for (let i = 0; i < 300; i++) {
  const run = await client.runs.get(thread.thread_id, slow.run_id);
  if (run.status === "running") break;
  await sleep(100);
}
await sleep(1000);
const started = Date.now();
await client.runs.cancel(thread.thread_id, slow.run_id, true, "interrupt");
const cancelMs = Date.now() - started;
const cancelled = await client.runs.get(thread.thread_id, slow.run_id);

console.log(
  JSON.stringify({
    assistants: assistants.map((a) => a.assistant_id),
    thread_id: thread.thread_id,
    events,
    chunks,
    final: lastValues.messages.map((m) => [m.type, m.content]),
    slow_run_id: slow.run_id,
    cancelled_status: cancelled.status,
    cancel_ms: cancelMs,
  }),
);
