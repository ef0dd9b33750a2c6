/* A run's admin page, live: while the run goes on, it follows the run's stream (the same
 * GET /api/runs/<id>/stream/ the playground reads) and, at most once a second, re-reads this
 * page and swaps in what the run changes: its summary, running card, picture and timeline, the
 * "Tree" fieldset (its sub-agent runs), and the title, breadcrumbs and actions above them (a
 * settled run loses "Cancel run…"). The rest of the form is left alone. A tool's "progress" events show on the running card
 * (console.js, shared with the playground); its elapsed time ticks every second. */
(function () {
  "use strict";
  const live = document.getElementById("run-live");
  if (!live || live.dataset.live !== "true" || !window.EventSource) return;
  let due = false, busy = false, done = false, lastProgress = null;
  // What a refresh swaps: the live section, the tree (its children's status and spend move on
  // their own executors) and the page's head (title, breadcrumbs, actions).
  const PARTS = ["#run-live", "fieldset.run-tree-live", "#content .titles", ".breadcrumbs", "ul.object-tools"];

  function swap(page) {
    PARTS.forEach((selector) => {
      const fresh = page.querySelector(selector), old = document.querySelector(selector);
      if (fresh && old) old.replaceWith(fresh);
      else if (old && !fresh) old.remove();
    });
    document.title = page.title;
    showProgress();
    tick();
  }

  // Once the stream has ended, the page is re-read until it shows the run settled: a refresh
  // that failed (the network, a refusal, a sign-in page a lost session redirects to) changes
  // nothing on the page and is tried again a second later, a bounded number of times.
  let retries = 0;
  async function refresh() {
    if (busy) { due = true; return; }
    busy = true;
    let settled = false;
    try {
      const response = await fetch(window.location.href, {credentials: "same-origin"});
      const page = response.ok ? new DOMParser().parseFromString(await response.text(), "text/html") : null;
      const fresh = page && page.getElementById("run-live");
      if (fresh) {  // this run's page, nothing else: anything else would remove the live section
        swap(page);
        settled = fresh.dataset.live !== "true";
      }
    } catch (e) { /* tried again below, or at the next event */ }
    busy = false;
    if (due || (done && !settled && retries++ < 60)) { due = false; window.setTimeout(refresh, 1000); }
  }
  const soon = () => { if (!busy) refresh(); else due = true; };

  function showProgress() {
    const card = document.getElementById("running-card"), target = document.getElementById("running-progress");
    if (lastProgress && card && target && card.dataset.name === lastProgress.name) {
      window.nrllmConsole.showProgress(target, lastProgress);
    }
  }

  function tick() {
    document.querySelectorAll("#running-card .elapsed[data-since]").forEach((node) => {
      const since = new Date(node.dataset.since);
      if (!isNaN(since)) node.textContent = window.nrllmConsole.duration(Date.now() - since.getTime());
    });
  }

  const source = new EventSource(live.dataset.streamUrl);
  source.addEventListener("step", (event) => {
    const step = JSON.parse(event.data);
    if (lastProgress && step.kind === "tool" && (step.payload || {}).call_id === lastProgress.call_id) lastProgress = null;
    soon();
  });
  source.addEventListener("delta", soon);
  source.addEventListener("progress", (event) => { lastProgress = JSON.parse(event.data); showProgress(); });
  ["done", "cancelled", "awaiting_approval", "failed"].forEach((name) => source.addEventListener(name, () => {
    source.close();
    done = true;
    lastProgress = null;
    refresh();
  }));
  window.setInterval(() => { if (!done) soon(); }, 2000);  // the bar in flight grows between steps
  window.setInterval(tick, 1000);
  tick();
})();
