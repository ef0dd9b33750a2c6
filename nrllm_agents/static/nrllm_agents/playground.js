/* The playground, progressively enhanced: the forms post without JavaScript; with it they
 * answer JSON, and the run page follows the run's Server-Sent Events stream from the last
 * step the server rendered, so a reload resumes with no step missing or repeated. While the
 * model writes, "delta" events grow its answer in a pending llm card (with a Stop button);
 * the recorded llm step replaces that card.
 * Each step arrives with its "details", described by the server. */
(function () {
  "use strict";

  const FINAL_EVENTS = ["done", "cancelled", "awaiting_approval", "failed"];
  const TERMINAL = ["completed", "failed", "cancelled"];

  // --- helpers ---------------------------------------------------------------------------
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const timeOf = (iso) => (iso && iso.length >= 19 ? iso.slice(11, 19) : "");

  // The server describes every step (nrllm_agents/describe.py): the stream sends its labelled
  // lines as "details", the same ones the server-rendered page shows.
  const stepDetails = (step) => step.details || [["payload", JSON.stringify(step.payload)]];

  function renderStep(step) {
    const interrupted = Boolean((step.payload || {}).interrupted);
    const li = el("li", {class: `step kind-${step.kind}${interrupted ? " interrupted" : ""}`,
                         "data-sequence": step.sequence, "data-kind": step.kind});
    const head = el("div", {class: "step-head"});
    head.append(el("span", {class: "seq"}, `#${step.sequence}`), " ", el("span", {class: "kind"}, step.kind), " ",
                el("span", {class: "round"}, `round ${step.round}`), " ");
    if (interrupted) head.append(el("span", {class: "badge interrupted"}, "interrupted"), " ");
    if (step.duration_ms !== null && step.duration_ms !== undefined) {
      head.append(el("span", {class: "duration"}, `${Math.round(step.duration_ms)} ms`), " ");
    }
    head.append(el("time", {class: "at", datetime: step.created_at, title: step.created_at}, `${timeOf(step.created_at)} UTC`));
    const body = el("dl", {class: "step-body"});
    stepDetails(step).forEach(([label, text]) => body.append(el("dt", {}, label), el("dd", {}, text)));
    li.append(head, body);
    return li;
  }

  function say(text, level) {
    let list = document.getElementById("messages");
    if (!list) {
      list = el("ul", {class: "messages", id: "messages"});
      document.querySelector("main").before(list);
    }
    list.replaceChildren(el("li", {class: `message ${level || "info"}`}, text));
  }

  async function postForm(form, submitter) {
    const body = new FormData(form);
    if (submitter && submitter.name) body.set(submitter.name, submitter.value);
    const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    const response = await fetch(form.action, {
      method: "POST", body, credentials: "same-origin",
      headers: {"Accept": "application/json", "X-CSRFToken": token},
    });
    let data = {};
    try { data = await response.json(); } catch (e) { /* not JSON: keep the status */ }
    return {ok: response.ok, status: response.status, data};
  }

  // --- the run form ------------------------------------------------------------------------
  const runForm = document.getElementById("run-form");
  if (runForm) {
    runForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      runForm.querySelectorAll(".js-error").forEach((n) => n.remove());
      const button = document.getElementById("start-button");
      button.disabled = true;
      try {
        const {status, data} = await postForm(runForm);
        if (data.url) { window.location.assign(data.url); return; }
        if (status === 400 && data.errors) {
          Object.entries(data.errors).forEach(([field, errors]) => {
            const box = runForm.querySelector(`[data-field="${field}"]`) || runForm;
            const list = el("ul", {class: "errorlist js-error"});
            errors.forEach((e) => list.append(el("li", {}, e)));
            box.append(list);
          });
        } else {
          say(data.detail || data.message || `Could not start the run (HTTP ${status}).`, "error");
        }
      } catch (e) {
        say("Could not reach the server.", "error");
      } finally {
        button.disabled = false;
      }
    });
  }

  // --- the run panel -----------------------------------------------------------------------
  const panel = document.getElementById("run");
  if (!panel || !panel.dataset.runId) return;

  const steps = document.getElementById("steps");
  const strip = document.getElementById("strip");
  const approval = document.getElementById("approval");
  const cancelForm = document.getElementById("cancel-form");
  const status = JSON.parse(document.getElementById("run-status").textContent);
  let last = parseInt(panel.dataset.lastSequence, 10);
  let source = null;

  const text = (id, value) => { document.getElementById(id).textContent = value; };
  const streamState = (value) => text("st-stream", value);

  function setStatus(value) {
    const badge = document.getElementById("st-status");
    badge.textContent = value;
    badge.className = `badge status-${value}`;
    const recent = document.querySelector(`#recent-runs a[data-run-id="${panel.dataset.runId}"] .badge`);
    if (recent) { recent.textContent = value.replace(/_/g, " "); recent.className = `badge status-${value}`; }
    cancelForm.hidden = TERMINAL.includes(value) || cancelForm.dataset.forbidden === "1";
    if (value !== "waiting_for_approval") approval.hidden = true;
  }

  function tick() {
    const started = strip.dataset.startedAt;
    if (!started) return;
    const end = strip.dataset.finishedAt ? new Date(strip.dataset.finishedAt) : new Date();
    text("st-elapsed", `${Math.max((end - new Date(started)) / 1000, 0).toFixed(1)} s`);
  }

  // --- the answer being written (deltas: never stored; the recorded llm step replaces them) --
  let pending = null;  // {round, chars, li, text}
  let answeredRound = -1;  // deltas of this round or earlier are stale
  const codePoints = (t) => Array.from(t || "");

  function dropPending() {
    if (pending) pending.li.remove();
    pending = null;
  }

  function pendingCard(round) {
    if (pending && pending.round === round) return pending;
    dropPending();
    const li = el("li", {class: "step kind-llm pending", "data-kind": "llm-pending", "data-round": round});
    const head = el("div", {class: "step-head"});
    const stop = el("button", {type: "button", class: "danger small", id: "stop-inline"}, "Stop");
    stop.addEventListener("click", () => act(cancelForm, document.getElementById("cancel-button")));
    head.append(el("span", {class: "kind"}, "llm"), " ", el("span", {class: "round"}, `round ${round}`), " ",
                el("span", {class: "badge writing"}, "writing…"), " ", stop);
    const body = el("dl", {class: "step-body"});
    const text = el("dd", {class: "live-text"});
    body.append(el("dt", {}, "answer so far"), text);
    li.append(head, body);
    let live = document.getElementById("live-steps");  // beside the recorded steps, not among them
    if (!live) {
      live = el("ul", {class: "steps live", id: "live-steps"});
      steps.after(live);
    }
    live.append(li);
    pending = {round, chars: 0, li, text};
    return pending;
  }

  function onDelta(delta) {
    if (delta.round <= answeredRound || TERMINAL.includes(status.status)) return;
    const card = pendingCard(delta.round);
    let piece = codePoints(delta.text);
    if (delta.offset < card.chars) piece = piece.slice(card.chars - delta.offset);  // a repeat
    else if (delta.offset > card.chars) card.text.append(" … ");  // a gap: some pieces were lost
    if (!piece.length) return;
    card.text.append(piece.join(""));
    card.chars = delta.offset + codePoints(delta.text).length;
  }

  function onStep(step) {
    const hint = document.getElementById("no-steps");
    if (hint) hint.remove();
    if (step.kind === "llm") answeredRound = Math.max(answeredRound, step.round);
    if (step.kind === "llm" || step.kind === "cancelled") dropPending();
    steps.append(renderStep(step));
    last = step.sequence;
    if (!strip.dataset.startedAt) strip.dataset.startedAt = step.created_at;
    if (step.kind === "llm") {
      const usage = (step.payload || {}).usage || {};
      text("st-iterations", parseInt(document.getElementById("st-iterations").textContent, 10) + 1);
      text("st-tokens", parseInt(document.getElementById("st-tokens").textContent, 10) + (usage.total_tokens || 0));
    }
    setStatus(step.kind === "cancelled" ? "cancelled" : (TERMINAL.includes(status.status) ? status.status : "running"));
  }

  // A stopped run can be continued from any of its steps (the server renders the same forms).
  function addForkButtons() {
    const token = cancelForm.querySelector("input[name=csrfmiddlewaretoken]").value;
    steps.querySelectorAll("li.step").forEach((li) => {
      if (li.dataset.kind === "cancelled" || li.querySelector(".fork-form")) return;
      const form = el("form", {method: "post", action: panel.dataset.forkUrl, class: "fork-form"});
      form.append(el("input", {type: "hidden", name: "csrfmiddlewaretoken", value: token}),
                  el("input", {type: "hidden", name: "from_sequence", value: li.dataset.sequence}),
                  el("button", {type: "submit", class: "fork-button"}, "Continue from here"));
      li.append(form);
    });
  }

  function onFinal(payload) {
    dropPending();
    Object.assign(status, payload);
    if (TERMINAL.includes(payload.status)) addForkButtons();
    setStatus(payload.status);
    text("st-reason", payload.termination_reason || "—");
    text("st-iterations", payload.iterations);
    text("st-tokens", payload.usage.total_tokens);
    if (document.getElementById("st-cost")) text("st-cost", payload.cost_text || "not priced");
    strip.dataset.startedAt = payload.started_at || strip.dataset.startedAt || "";
    strip.dataset.finishedAt = payload.finished_at || "";
    tick();
    const outcome = document.getElementById("outcome");
    if (payload.status === "cancelled" && payload.cancel_text) {
      outcome.replaceChildren(el("p", {class: "decision"}, payload.cancel_text));
    } else if (payload.error) {
      outcome.replaceChildren(el("p", {class: "error"}, payload.error));
    } else if (payload.final_text) {
      outcome.replaceChildren(el("p", {class: "final"}, payload.final_text));
    } else {
      outcome.replaceChildren();
    }
    if (payload.status === "waiting_for_approval") {
      const list = document.getElementById("pending-calls");
      list.replaceChildren(...payload.pending_text.map((call) => {
        const li = el("li");
        li.append(el("code", {}, call));
        return li;
      }));
      approval.hidden = false;
    }
  }

  function follow() {
    if (source) return;
    const es = new EventSource(`${panel.dataset.streamUrl}?after=${last}`);
    source = es;
    es.onopen = () => streamState("live");
    es.addEventListener("step", (event) => onStep(JSON.parse(event.data)));
    es.addEventListener("delta", (event) => onDelta(JSON.parse(event.data)));
    FINAL_EVENTS.forEach((name) => es.addEventListener(name, (event) => {
      es.close();
      source = null;
      onFinal(JSON.parse(event.data));
      streamState(name === "awaiting_approval" ? "paused (waiting for approval)" : "complete");
    }));
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        source = null;
        streamState("unavailable — reload the page");
      } else {
        streamState("reconnecting…");  // EventSource resumes with Last-Event-ID by itself
      }
    };
  }

  async function act(form, submitter) {
    try {
      const {ok, status: code, data} = await postForm(form, submitter);
      say(data.message || data.detail || `HTTP ${code}`, ok ? "success" : (code === 409 ? "warning" : "error"));
      if (ok && form.classList.contains("approve-form")) { approval.hidden = true; setStatus("running"); }
      follow();  // a waiting run's stream had closed: reopen it to see what the action did
    } catch (e) {
      say("Could not reach the server.", "error");
    }
  }

  cancelForm.addEventListener("submit", (event) => { event.preventDefault(); act(cancelForm, event.submitter); });
  approval.querySelector("form").addEventListener("submit", (event) => {
    event.preventDefault();
    act(event.currentTarget, event.submitter);
  });

  window.setInterval(tick, 500);
  if (panel.dataset.live === "true") follow();
})();
