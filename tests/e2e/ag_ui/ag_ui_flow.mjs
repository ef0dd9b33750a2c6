// The unmodified @ag-ui/client HttpAgent against a live server (issue 49): a run with a tool, a
// Stop mid-answer, an approval resumed, a reattach to a run in progress. Every event it gets is
// checked against @ag-ui/core's own schemas (EventSchemas). Prints one JSON line of what it saw.
//
// AG_BASE: the site's root; AG_TOKEN: alice's DRF token; AG_MODULES: the node_modules folder.
import { randomUUID } from "node:crypto";

const modules = process.env.AG_MODULES;
const { HttpAgent } = await import(`${modules}/@ag-ui/client/dist/index.mjs`);
const { EventSchemas } = await import(`${modules}/@ag-ui/core/dist/schemas.mjs`);
const base = process.env.AG_BASE;
const headers = { Authorization: `Token ${process.env.AG_TOKEN}` };
const invalid = [];
const sent = new Set();

function agentFor(name, threadId = randomUUID()) {
  const agent = new HttpAgent({ url: `${base}/ag-ui/agents/${name}/`, headers, threadId });
  agent.seen = [];
  agent.subscribe({
    onEvent: ({ event }) => {
      const checked = EventSchemas.safeParse(event);
      if (!checked.success) invalid.push({ type: event.type, issues: checked.error.issues });
      sent.add(event.type);
      agent.seen.push(event);
    },
  });
  return agent;
}

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text });
}

// The app's Stop: AG-UI has no server-side cancel, so the page posts ours (docs/howto/ag-ui.md).
async function stop(runId) {
  const answer = await fetch(`${base}/ag-ui/runs/${encodeURIComponent(runId)}/cancel/`, { method: "POST", headers });
  return { status: answer.status, body: await answer.json() };
}

const types = (agent) => agent.seen.map((e) => e.type);
const outcome = (agent) => agent.seen.findLast((e) => e.type === "RUN_FINISHED")?.outcome ?? null;

async function withTool() {
  const agent = agentFor("calc");
  say(agent, "add 2 and 3");
  const runId = randomUUID();
  await agent.runAgent({ runId });
  return { runId, threadId: agent.threadId, types: types(agent), outcome: outcome(agent),
           messages: agent.messages.map((m) => [m.role, m.content ?? null, (m.toolCalls ?? []).map((c) => c.function.name)]) };
}

async function stopMidAnswer() {
  const agent = agentFor("slow");
  say(agent, "write forever");
  const runId = randomUUID();
  let stopped = null;
  let pressed = 0;
  const done = new Promise((resolve) => {
    agent.subscribe({
      onTextMessageContentEvent: () => {
        if (stopped === null) {
          pressed = Date.now();
          stopped = stop(runId);
        }
      },
      onRunFinishedEvent: () => resolve(Date.now()),
    });
  });
  await agent.runAgent({ runId });
  const finished = await done;
  return { runId, stop: await stopped, outcome: outcome(agent), ms: finished - pressed,
           partial: agent.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("") };
}

async function approval() {
  const agent = agentFor("notes");
  say(agent, "take a note");
  await agent.runAgent({ runId: randomUUID() });
  const asked = outcome(agent);
  agent.seen = [];
  const resume = asked.interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }));
  await agent.runAgent({ runId: randomUUID(), resume });
  return { asked, types: types(agent), outcome: outcome(agent) };
}

async function reattach() {
  const first = agentFor("slowish");
  say(first, "take your time");
  const runId = randomUUID();
  let cut;
  const cutDone = new Promise((resolve) => (cut = resolve));
  first.subscribe({ onTextMessageContentEvent: () => { first.abortRun(); cut(); } });
  const running = first.runAgent({ runId }).catch((e) => ({ aborted: String(e) }));
  await cutDone;
  await running;
  // A page reload: a new agent of the same thread, the same run id.
  const second = agentFor("slowish", first.threadId);
  say(second, "take your time");
  await second.runAgent({ runId });
  return { runId, types: types(second), outcome: outcome(second),
           answer: second.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("") };
}

const seen = { tool: await withTool(), stop: await stopMidAnswer(), approval: await approval(), reattach: await reattach() };
seen.invalid = invalid;
seen.sent = [...sent].sort();
console.log(JSON.stringify(seen));
