/* The playground, progressively enhanced: the forms post without JavaScript; with it they
 * answer JSON, and the run page follows the run's Server-Sent Events stream from the last
 * step the server rendered, so a reload resumes with no step missing or repeated. While the
 * model writes, "delta" events grow its answer in a pending llm card (with a Stop button);
 * the recorded llm step replaces that card. Between steps, the work in flight (a model call or
 * a tool) shows as a pending card with its elapsed time and a Stop button; the picture
 * (timeline and spend) is re-fetched while the run runs, and its tree (its sub-agent runs) while
 * any run of it is active. Times read relative ("12 s ago") with the local time to the
 * millisecond on hover; steps can be filtered by kind and collapsed.
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

  // --- one time format and one duration format, shared (console.js) -----------------------
  const {duration, formatTimes} = window.nrllmConsole;

  // The server describes every step (nrllm_agents/describe.py): the stream sends its labelled
  // lines as "details", the same ones the server-rendered page shows.
  const stepDetails = (step) => step.details || [["payload", JSON.stringify(step.payload)]];

  function toggleButton(sequence) {
    const button = el("button", {type: "button", class: "toggle", "aria-expanded": "true",
                                 "aria-controls": `step-body-${sequence}`, title: "Collapse or expand this step"});
    button.append(el("span", {"aria-hidden": "true"}, "▾"), el("span", {class: "visually-hidden"}, `step #${sequence}`));
    return button;
  }

  function renderStep(step) {
    const payload = step.payload || {};
    const interrupted = Boolean(payload.interrupted);
    // A step a cancel cut short carries an error text, but it is a decision, not a failure.
    const failed = !interrupted && payload.error !== undefined && payload.error !== null;
    const li = el("li", {class: `step kind-${step.kind}${interrupted ? " interrupted" : ""}${failed ? " failed" : ""}`,
                         id: `step-${step.sequence}`, tabindex: "-1",
                         "data-sequence": step.sequence, "data-kind": step.kind});
    const head = el("div", {class: "step-head"});
    head.append(toggleButton(step.sequence), el("span", {class: "seq"}, `#${step.sequence}`), " ",
                el("span", {class: "kind"}, step.kind), " ", el("span", {class: "round"}, `round ${step.round}`), " ");
    // who cancelled: the cancelled step, written after the one it cut short, says (fillCancelWho)
    if (interrupted) head.append(el("span", {class: "badge interrupted"}, "interrupted by cancel"), " ",
                                 el("span", {class: "cancel-who"}, ""), " ");
    if (failed) head.append(el("span", {class: "badge failed"}, step.kind === "llm" ? "model failed" : "tool error"), " ");
    if (step.duration_ms !== null && step.duration_ms !== undefined) {
      head.append(el("span", {class: "duration"}, duration(step.duration_ms)), " ");
    }
    head.append(el("time", {class: "at", datetime: step.created_at}, ""));
    const body = el("dl", {class: "step-body", id: `step-body-${step.sequence}`});
    stepDetails(step).forEach(([label, text]) => body.append(el("dt", {}, label), el("dd", {}, text)));
    li.append(head, body);
    formatTimes(li);
    if (step.kind === "cancelled") fillCancelWho(step);
    return li;
  }

  // A cancelled step names who cancelled ("by alice via api"): the steps it cut short say it too.
  function fillCancelWho(step) {
    const line = stepDetails(step).find(([label]) => label === "cancelled");
    if (!line) return;
    document.querySelectorAll("li.interrupted .cancel-who").forEach((node) => {
      if (!node.textContent) node.textContent = line[1];
    });
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
    // a button may post the form elsewhere (the cancel among a doubt's decisions)
    const url = submitter && submitter.hasAttribute("formaction") ? submitter.formAction : form.action;
    const response = await fetch(url, {
      method: "POST", body, credentials: "same-origin",
      headers: {"Accept": "application/json", "X-CSRFToken": token},
    });
    let data = {};
    try { data = await response.json(); } catch (e) { /* not JSON: keep the status */ }
    return {ok: response.ok, status: response.status, data};
  }

  // --- the run form ------------------------------------------------------------------------
  // The tools: a filter over their names and descriptions (groups with a match open).
  const toolSearch = document.getElementById("tool-search");
  if (toolSearch) {
    toolSearch.hidden = false;
    toolSearch.addEventListener("input", () => {
      const want = toolSearch.value.trim().toLowerCase();
      document.querySelectorAll(".tool-group").forEach((group) => {
        let shown = 0;
        group.querySelectorAll("li[data-tool]").forEach((li) => {
          li.hidden = Boolean(want) && !li.textContent.toLowerCase().includes(want);
          if (!li.hidden) shown += 1;
        });
        group.hidden = !shown;
        if (want && shown) group.open = true;
      });
    });
  }

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
  // The decision a waiting run needs (approve or deny; or, for a call in doubt, whether it
  // happened): the server renders it, and it is re-fetched when the run comes to wait.
  const decision = () => document.getElementById("decision");
  const cancelForm = document.getElementById("cancel-form");
  const status = JSON.parse(document.getElementById("run-status").textContent);
  let remaining = JSON.parse(document.getElementById("run-remaining").textContent);  // calls not run yet
  let last = parseInt(panel.dataset.lastSequence, 10);
  let source = null;

  const text = (id, value) => { document.getElementById(id).textContent = value; };
  const streamState = (value) => text("st-stream", value);

  function setStatus(value) {
    status.status = value;
    const badge = document.getElementById("st-status");
    badge.textContent = value;
    badge.className = `badge status-${value}`;
    const recent = document.querySelector(`#recent-runs a[data-run-id="${panel.dataset.runId}"] .badge`);
    if (recent) { recent.textContent = value.replace(/_/g, " "); recent.className = `badge status-${value}`; }
    cancelForm.hidden = TERMINAL.includes(value) || cancelForm.dataset.forbidden === "1";
    if (value !== "waiting_for_approval") decision().hidden = true;
  }

  function tick() {
    const started = strip.dataset.startedAt;
    if (started) {
      const end = strip.dataset.finishedAt ? new Date(strip.dataset.finishedAt) : new Date();
      text("st-elapsed", `${Math.max((end - new Date(started)) / 1000, 0).toFixed(1)} s`);
    }
    if (pending) pending.elapsed.textContent = duration(Date.now() - pending.since);
  }

  // --- fragments the server renders, re-fetched: the picture while the run runs (its bar in
  // flight grows), the tree while the run or a run below it is active -------------------------
  // What a user types in a refreshed section (the reason of an approval waiting below) and where
  // the caret is survive the refresh: each field is matched by its run and its name.
  function keepTyping(old, fresh, focused) {
    old.querySelectorAll("[data-run-id] input[type=text]").forEach((input) => {
      const runId = input.closest("[data-run-id]").dataset.runId;
      const twin = fresh.querySelector(`[data-run-id="${CSS.escape(runId)}"] input[name="${CSS.escape(input.name)}"]`);
      if (!twin) return;
      twin.value = input.value;
      if (input === focused) {
        twin.focus();
        twin.setSelectionRange(input.selectionStart, input.selectionEnd);
      }
    });
  }
  function refresher(url, id, after) {
    let fetching = false, stale = false;
    async function refresh() {
      if (fetching) { stale = true; return; }
      fetching = true;
      try {
        const response = await fetch(url, {credentials: "same-origin"});
        if (response.ok) {
          const holder = document.createElement("div");
          holder.innerHTML = await response.text();
          const fresh = holder.querySelector(`#${id}`);
          const old = document.getElementById(id);
          if (fresh && old) {
            const focused = document.activeElement;
            old.replaceWith(fresh);
            keepTyping(old, fresh, focused);
            if (after) after(fresh);
          }
        }
      } catch (e) { /* the next step or tick tries again */ }
      fetching = false;
      if (stale) { stale = false; refresh(); }
    }
    return refresh;
  }
  const refreshPicture = refresher(panel.dataset.pictureUrl, "run-picture", (fresh) => {
    bindTips(fresh);
    if (fresh.dataset.costText && !TERMINAL.includes(status.status)) text("st-cost", fresh.dataset.costText);
  });
  const refreshTree = refresher(document.getElementById("run-tree").dataset.treeUrl, "run-tree");
  const refreshDecision = refresher(window.location.pathname, "decision", (fresh) => {
    formatTimes(fresh);
    if (fresh.querySelector("#in-doubt")) streamState("paused (a call in doubt)");
  });
  const treeActive = () => {
    const section = document.getElementById("run-tree");
    return !section.hidden && section.dataset.active === "true";
  };

  // --- tooltips that also show on focus (the picture's bars are links to their steps) ------
  const tip = el("div", {class: "tip", id: "tip", role: "tooltip", hidden: ""});
  document.body.append(tip);
  function showTip(event) {
    const target = event.currentTarget;
    tip.textContent = target.dataset.tip;
    const box = target.getBoundingClientRect();
    tip.hidden = false;
    tip.style.left = `${Math.max(4, Math.min(window.scrollX + box.left, window.scrollX + window.innerWidth - tip.offsetWidth - 8))}px`;
    tip.style.top = `${window.scrollY + box.bottom + 6}px`;
  }
  const hideTip = () => { tip.hidden = true; };
  function bindTips(root) {
    root.querySelectorAll("[data-tip]").forEach((node) => {
      ["focus", "mouseenter"].forEach((name) => node.addEventListener(name, showTip));
      ["blur", "mouseleave"].forEach((name) => node.addEventListener(name, hideTip));
    });
  }
  bindTips(document);

  // --- the work in flight: a pending card (deltas grow a model's answer in it) -------------
  let pending = null;  // {kind, round, chars, li, text, elapsed, since}
  let answeredRound = -1;  // deltas of this round or earlier are stale
  let finalAnswer = false;  // the last answer asked for nothing: no model call follows
  const codePoints = (t) => Array.from(t || "");

  function dropPending() {
    if (pending) pending.li.remove();
    pending = null;
    writing(0);
  }

  // The tokens being written (about 4 characters a token), beside the recorded ones.
  function writing(chars) {
    const tokens = document.getElementById("st-tokens");
    const recorded = parseInt(tokens.dataset.recorded, 10) || 0;
    tokens.textContent = chars ? `${recorded} (+~${Math.ceil(chars / 4)} being written)` : String(recorded);
  }

  function pendingCard(kind, round, name, since) {
    if (pending && pending.kind === kind && pending.round === round && pending.name === name) return pending;
    dropPending();
    const li = el("li", {class: `step kind-${kind} pending`, "data-kind": `${kind}-pending`, "data-round": round});
    const head = el("div", {class: "step-head"});
    const stop = el("button", {type: "button", class: "danger small", id: "stop-inline"}, "Stop");
    stop.hidden = cancelForm.dataset.forbidden === "1";
    stop.addEventListener("click", () => act(cancelForm, document.getElementById("cancel-button")));
    const badge = el("span", {class: "badge writing"}, kind === "llm" ? "waiting for the model…" : "running…");
    const elapsed = el("span", {class: "elapsed", id: "pending-elapsed", "aria-label": "elapsed"}, "0 ms");
    head.append(el("span", {class: "kind"}, kind === "llm" ? "llm" : `tool ${name}`), " ",
                el("span", {class: "round"}, `round ${round}`), " ", badge, " ", elapsed, " ", stop);
    const body = el("dl", {class: "step-body"});
    const live = el("dd", {class: "live-text"});
    if (kind === "llm") body.append(el("dt", {}, "answer so far"), live);
    else body.append(el("dt", {}, "running"), el("dd", {class: "tool-progress"}, `${name}: started, no result yet`));
    li.append(head, body);
    let list = document.getElementById("live-steps");  // beside the recorded steps, not among them
    if (!list) {
      list = el("ul", {class: "steps live", id: "live-steps", "aria-live": "polite"});
      steps.after(list);
    }
    list.append(li);
    pending = {kind, round, name, chars: 0, li, text: live, badge, elapsed, since: since || Date.now()};
    tick();
    return pending;
  }

  // What runs now, by the rule of gantt.in_flight: the next call the last answer asked for,
  // else the model (unless that answer was the final one).
  function showInFlight(round, since) {
    if (status.status !== "running") { dropPending(); return; }
    if (remaining.length) pendingCard("tool", round, remaining[0], since);
    else if (!finalAnswer) pendingCard("llm", Math.max(round, answeredRound + 1), "", since);
    else dropPending();
  }

  function onDelta(delta) {
    if (delta.round <= answeredRound || TERMINAL.includes(status.status)) return;
    const card = pendingCard("llm", delta.round, "", pending && pending.kind === "llm" ? pending.since : Date.now());
    card.badge.textContent = "writing…";
    let piece = codePoints(delta.text);
    if (delta.offset < card.chars) piece = piece.slice(card.chars - delta.offset);  // a repeat
    else if (delta.offset > card.chars) card.text.append(" … ");  // a gap: some pieces were lost
    if (!piece.length) return;
    card.text.append(piece.join(""));
    card.chars = delta.offset + codePoints(delta.text).length;
    writing(card.chars);
  }

  // A tool's progress (event "progress": its latest report) on the running tool's card.
  function onProgress(report) {
    if (!pending || pending.kind !== "tool" || pending.name !== report.name) return;
    const target = pending.li.querySelector(".tool-progress");
    if (target) window.nrllmConsole.showProgress(target, report);
  }

  function onStep(step) {
    const hint = document.getElementById("no-steps");
    if (hint) hint.remove();
    const payload = step.payload || {};
    if (step.kind === "llm") {
      answeredRound = Math.max(answeredRound, step.round);
      remaining = (payload.tool_calls || []).map((call) => String((call || {}).name || "?"));
      finalAnswer = !remaining.length || (payload.error !== undefined && payload.error !== null);
    } else if (step.kind === "tool") {
      remaining.shift();
    }
    if (step.kind === "llm" || step.kind === "cancelled" || step.kind === "tool") dropPending();
    const li = renderStep(step);
    applyFilter(li);
    steps.append(li);
    last = step.sequence;
    if (!strip.dataset.startedAt) strip.dataset.startedAt = step.created_at;
    if (step.kind === "llm") {
      const usage = payload.usage || {};
      text("st-iterations", parseInt(document.getElementById("st-iterations").textContent, 10) + 1);
      const tokens = document.getElementById("st-tokens");
      tokens.dataset.recorded = (parseInt(tokens.dataset.recorded, 10) || 0) + (usage.total_tokens || 0);
      writing(0);
    }
    setStatus(step.kind === "cancelled" ? "cancelled" : (TERMINAL.includes(status.status) ? status.status : "running"));
    showInFlight(step.round, new Date(step.created_at).getTime());
    countShown();
    refreshPicture();
  }

  // --- a step's menu: continue from here (a stopped run), with or without changes ----------
  function stepMenu(sequence) {
    const token = cancelForm.querySelector("input[name=csrfmiddlewaretoken]").value;
    const menu = el("details", {class: "step-menu"});
    const summary = el("summary", {title: `Actions for step #${sequence}`});
    summary.append(el("span", {"aria-hidden": "true"}, "⋯"), el("span", {class: "visually-hidden"}, `Actions for step #${sequence}`));
    const box = el("div", {class: "menu"});
    const form = el("form", {method: "post", action: panel.dataset.forkUrl, class: "fork-form"});
    form.append(el("input", {type: "hidden", name: "csrfmiddlewaretoken", value: token}),
                el("input", {type: "hidden", name: "from_sequence", value: sequence}),
                el("button", {type: "submit", class: "fork-button"}, "Continue from here"));
    box.append(form);
    if (document.getElementById("fork-panel")) {
      box.append(el("a", {class: "fork-change", href: "#fork-panel", "data-sequence": sequence}, "Continue from here with changes…"));
    }
    menu.append(summary, box);
    return menu;
  }

  function addForkButtons() {
    steps.querySelectorAll("li.step").forEach((li) => {
      if (li.dataset.kind === "cancelled" || li.querySelector(".step-menu")) return;
      li.querySelector(".step-head").append(stepMenu(li.dataset.sequence));
    });
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest(".fork-change");
    if (!link) return;
    const fork = document.getElementById("fork-panel");
    if (!fork) return;
    event.preventDefault();
    fork.open = true;
    document.getElementById("fork-from").value = link.dataset.sequence;
    link.closest("details").open = false;
    fork.scrollIntoView({block: "nearest"});
    document.getElementById("fork-from").focus();
  });

  // The final answer shows once: in the outcome; its card links there.
  function markFinalAnswer(finalText) {
    const cards = steps.querySelectorAll("li.step[data-kind=llm]");
    const card = cards[cards.length - 1];
    if (!card || card.classList.contains("final-answer")) return;
    const dts = Array.from(card.querySelectorAll(".step-body dt"));
    const dt = dts.find((node) => node.textContent === "content");
    if (!dt || dt.nextElementSibling.textContent !== finalText) return;
    const dd = dt.nextElementSibling;
    const kept = el("span", {class: "duplicate", hidden: ""}, dd.textContent);
    dd.replaceChildren(el("a", {href: "#outcome", class: "see-answer"}, "the final answer, shown above"), kept);
    dd.className = "v-content";
    card.classList.add("final-answer");
  }

  function onFinal(payload) {
    dropPending();
    Object.assign(status, payload);
    setStatus(payload.status);
    if (TERMINAL.includes(payload.status)) addForkButtons();
    text("st-reason", payload.termination_reason || "—");
    text("st-iterations", payload.iterations);
    const tokens = document.getElementById("st-tokens");
    tokens.dataset.recorded = payload.usage.total_tokens;
    writing(0);
    if (payload.cost_text) text("st-cost", payload.cost_text);
    strip.dataset.startedAt = payload.started_at || strip.dataset.startedAt || "";
    strip.dataset.finishedAt = payload.finished_at || "";
    tick();
    const outcome = document.getElementById("outcome");
    if (payload.status === "cancelled" && payload.cancel_text) {
      outcome.replaceChildren(el("p", {class: "decision"}, payload.cancel_text));
    } else if (payload.error) {
      const p = el("p", {class: "error run-error", role: "alert"});
      p.append(el("strong", {}, "Failed:"), ` ${payload.error}`);
      outcome.replaceChildren(p);
    } else if (payload.final_text) {
      outcome.replaceChildren(el("p", {class: "final"}, payload.final_text));
      if (payload.status === "completed") markFinalAnswer(payload.final_text);
    } else {
      outcome.replaceChildren();
    }
    if (payload.status === "waiting_for_approval") refreshDecision();
    refreshPicture();
    refreshTree();
  }

  // --- long runs: filter by kind, collapse, jump from a bar to its step --------------------
  const tools = document.getElementById("step-tools");
  const filter = document.getElementById("kind-filter");
  tools.hidden = false;
  steps.querySelectorAll(".toggle").forEach((b) => { b.hidden = false; });

  function applyFilter(li) {
    const want = filter.value;
    li.hidden = Boolean(want) && !(want === "failed" ? li.classList.contains("failed") : li.dataset.kind === want);
  }
  function countShown() {
    const all = steps.querySelectorAll("li.step");
    const shown = Array.from(all).filter((li) => !li.hidden).length;
    text("steps-shown", filter.value ? `${shown} of ${all.length} steps shown` : `${all.length} steps`);
  }
  filter.addEventListener("change", () => {
    steps.querySelectorAll("li.step").forEach(applyFilter);
    countShown();
  });
  function collapse(li, collapsed) {
    const body = li.querySelector(".step-body");
    const button = li.querySelector(".toggle");
    if (!body || !button) return;
    body.hidden = collapsed;
    button.setAttribute("aria-expanded", String(!collapsed));
    li.classList.toggle("collapsed", collapsed);
  }
  steps.addEventListener("click", (event) => {
    const button = event.target.closest(".toggle");
    if (button) collapse(button.closest("li.step"), button.getAttribute("aria-expanded") === "true");
  });
  document.getElementById("collapse-all").addEventListener("click", () => steps.querySelectorAll("li.step").forEach((li) => collapse(li, true)));
  document.getElementById("expand-all").addEventListener("click", () => steps.querySelectorAll("li.step").forEach((li) => collapse(li, false)));

  function revealTarget() {
    const match = /^#step-(\d+)$/.exec(window.location.hash);
    if (!match) return;
    const li = document.getElementById(`step-${match[1]}`);
    if (!li) return;
    if (li.hidden) { filter.value = ""; steps.querySelectorAll("li.step").forEach(applyFilter); countShown(); }
    collapse(li, false);
    li.scrollIntoView({block: "center"});
    li.focus({preventScroll: true});
  }
  window.addEventListener("hashchange", revealTarget);
  countShown();
  revealTarget();

  function follow() {
    if (source) return;
    const es = new EventSource(`${panel.dataset.streamUrl}?after=${last}`);
    source = es;
    es.onopen = () => streamState("live");
    es.addEventListener("step", (event) => onStep(JSON.parse(event.data)));
    es.addEventListener("delta", (event) => onDelta(JSON.parse(event.data)));
    es.addEventListener("progress", (event) => onProgress(JSON.parse(event.data)));
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
      if (ok && form.closest("#decision")) {
        decision().hidden = true;
        if (!(submitter && submitter.hasAttribute("formaction"))) setStatus("running");  // a cancel says itself
      }
      follow();  // a waiting run's stream had closed: reopen it to see what the action did
    } catch (e) {
      say("Could not reach the server.", "error");
    }
  }

  cancelForm.addEventListener("submit", (event) => { event.preventDefault(); act(cancelForm, event.submitter); });
  document.addEventListener("submit", (event) => {  // the decision's forms, re-fetched or not
    if (!event.target.closest("#decision")) return;
    event.preventDefault();
    act(event.target, event.submitter);
  });

  // The work in flight when the page was rendered (elapsed times count from the server's clock).
  const picture = document.getElementById("run-picture");
  if (picture && picture.dataset.inFlight && status.status === "running") {
    const since = new Date(picture.dataset.inFlightSince).getTime();
    if (picture.dataset.inFlight === "llm") pendingCard("llm", parseInt(picture.dataset.inFlightRound, 10), "", since);
    else pendingCard("tool", parseInt(picture.dataset.inFlightRound, 10), picture.dataset.inFlightName, since);
  }

  window.setInterval(tick, 250);
  // while it runs, or waits for sub-agent runs that do (their bars grow too)
  window.setInterval(() => { if (status.status === "running" || treeActive()) refreshPicture(); }, 1000);
  // children run on other executors: their moves are not in this run's stream
  window.setInterval(() => { if (treeActive()) refreshTree(); }, 1000);
  if (panel.dataset.live === "true") follow();
})();
