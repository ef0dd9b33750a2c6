// The Node SDK (@langchain/langgraph-sdk, unmodified) through issue 38's flow, as test_python_sdk.py
// drives the Python SDK: assistants, a thread, a run streamed in pieces (messages-tuple) whose final
// values hold the answer, reject's conflict, interrupt keeping the partial turn, an approval resumed
// through command, cancel(wait, "interrupt") and cancel(wait, "rollback"). Prints one JSON object,
// one key a step, with what it saw; test_node_sdk.py asserts on it. Any error exits non-zero.
// Env: LG_URL (the protocol's base URL), LG_API_KEY (a DRF token), LG_SDK (the package's folder),
// LG_ROOT (the site, for our own /api/), LG_SCRIPTS (the scripted provider's scripts, by name).
import { pathToFileURL } from "node:url";
import path from "node:path";

const { Client } = await import(pathToFileURL(path.join(process.env.LG_SDK, "dist", "index.js")).href);
const client = new Client({ apiUrl: process.env.LG_URL, apiKey: process.env.LG_API_KEY });
const scripts = JSON.parse(process.env.LG_SCRIPTS);
const said = (text) => ({ messages: [{ role: "user", content: text }] });
const contents = (messages) => messages.map((m) => [m.type, m.content]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const PIECE_MS = 1000; // the slow script writes one piece a second

// The SDK's error for a failed call ({name, status}), or null when the call succeeded.
async function failure(call) {
  try {
    await call;
    return null;
  } catch (error) {
    return { name: error.constructor.name, status: error.status ?? null };
  }
}

// Waits, through the protocol, until the run's model call has written a piece.
async function writing(threadId, runId) {
  const stop = new AbortController();
  try {
    for await (const part of client.runs.joinStream(threadId, runId, { streamMode: "messages-tuple", signal: stop.signal })) {
      if (part.event === "messages") return;
    }
  } finally {
    stop.abort(); // leave the stream; the run goes on (cancel_on_disconnect is off)
  }
  throw new Error(`run ${runId} ended before its model call wrote anything`);
}

// Our own REST API, read right after a call returns: the run's recorded steps.
async function steps(runId) {
  const response = await fetch(`${process.env.LG_ROOT}/api/runs/${runId}/events/`, {
    headers: { Authorization: `Token ${process.env.LG_API_KEY}` },
  });
  if (!response.ok) throw new Error(`/api/runs/${runId}/events/ answered ${response.status}`);
  const page = await response.json();
  return { status: page.status, kinds: page.results.map((e) => e.kind) };
}

const seen = {};

seen.assistants = (await client.assistants.search()).map((a) => a.assistant_id);

{
  const thread = await client.threads.create({ metadata: { topic: "pieces" } });
  const created = {};
  const parts = [];
  for await (const part of client.runs.stream(thread.thread_id, "helper", {
    input: said("answer me"),
    streamMode: ["messages-tuple", "values", "updates"],
    context: { script: scripts.answer },
    onRunCreated: (meta) => Object.assign(created, meta),
  })) {
    parts.push(part);
  }
  const messages = parts.filter((p) => p.event === "messages").map((p) => p.data[0]);
  const values = parts.filter((p) => p.event === "values").map((p) => p.data);
  const state = await client.threads.getState(thread.thread_id);
  seen.stream = {
    thread: [thread.status, thread.metadata],
    events: parts.map((p) => p.event),
    created_thread: created.thread_id === thread.thread_id,
    pieces: messages.filter((m) => m.type === "AIMessageChunk").map((m) => m.content),
    piece_ids: [...new Set(messages.map((m) => m.id))],
    final_id: values.at(-1).messages.at(-1).id,
    final: contents(values.at(-1).messages),
    updates: parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)),
    run: await client.runs.get(thread.thread_id, created.run_id),
    state: [contents(state.values.messages), state.next, state.interrupts],
  };
}

{
  const thread = (await client.threads.create()).thread_id;
  const first = await client.runs.create(thread, "helper", { input: said("take long"), context: { script: scripts.slow } });
  await writing(thread, first.run_id);
  await sleep(1.5 * PIECE_MS); // it writes a few words
  const rejected = await failure(
    client.runs.create(thread, "helper", { input: said("refused"), multitaskStrategy: "reject" }),
  );
  const runsAfterReject = (await client.runs.list(thread)).map((r) => r.run_id);
  const second = await client.runs.create(thread, "helper", {
    input: said("now this"),
    multitaskStrategy: "interrupt",
    context: { script: scripts.done },
  });
  const joined = await client.runs.join(thread, second.run_id);
  seen.multitask = {
    first: first.run_id,
    second: second.run_id,
    rejected,
    runs_after_reject: runsAfterReject,
    joined: contents(joined.messages).at(-1),
    first_status: (await client.runs.get(thread, first.run_id)).status,
    turns: contents((await client.threads.getState(thread)).values.messages),
    runs: (await client.runs.list(thread)).map((r) => r.run_id),
  };
}

{
  const thread = (await client.threads.create()).thread_id;
  const values = await client.runs.wait(thread, "helper", { input: said("take a note"), context: { script: scripts.note } });
  const waiting = await client.threads.getState(thread);
  const threadStatus = (await client.threads.get(thread)).status;
  const parts = [];
  for await (const part of client.runs.stream(thread, "helper", { command: { resume: true }, streamMode: "updates" })) {
    parts.push(part);
  }
  seen.approval = {
    interrupts: values.__interrupt__,
    waiting: [waiting.next, waiting.interrupts.map((i) => i.id)],
    thread_status: threadStatus,
    updates: parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)),
    last: contents((await client.threads.getState(thread)).values.messages).at(-1),
    resumed_again: await failure(client.runs.create(thread, "helper", { command: { resume: true } })),
  };
}

{
  const thread = (await client.threads.create()).thread_id;
  const run = await client.runs.create(thread, "helper", { input: said("write forever"), context: { script: scripts.slow } });
  await writing(thread, run.run_id);
  await sleep(1.5 * PIECE_MS);
  const started = Date.now();
  await client.runs.cancel(thread, run.run_id, true, "interrupt");
  const cancelMs = Date.now() - started;
  seen.cancel = {
    run: run.run_id,
    cancel_ms: cancelMs,
    on_return: await steps(run.run_id), // read before anything else: wait=true means it has stopped
    status: (await client.runs.get(thread, run.run_id)).status,
    thread_status: (await client.threads.get(thread)).status,
  };
}

{
  const thread = (await client.threads.create()).thread_id;
  const first = await client.runs.create(thread, "helper", { input: said("one"), context: { script: scripts.first } });
  await client.runs.join(thread, first.run_id);
  const run = await client.runs.create(thread, "helper", { input: said("two"), context: { script: scripts.slow } });
  await writing(thread, run.run_id);
  await client.runs.cancel(thread, run.run_id, true, "rollback");
  seen.rollback = {
    first: first.run_id,
    run: run.run_id,
    get: await failure(client.runs.get(thread, run.run_id)),
    runs: (await client.runs.list(thread)).map((r) => r.run_id),
    last: contents((await client.threads.getState(thread)).values.messages).at(-1),
  };
}

console.log(JSON.stringify(seen));
