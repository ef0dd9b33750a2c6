/* A run's admin page, live: while the run goes on, it follows the run's stream (the same
 * GET /api/runs/<id>/stream/ the playground reads) and, at most once a second, re-reads this
 * page and swaps in its summary, picture and step timeline. The form below is left alone. */
(function () {
  "use strict";
  const live = document.getElementById("run-live");
  if (!live || live.dataset.live !== "true" || !window.EventSource) return;
  let due = false, busy = false, done = false;

  async function refresh() {
    if (busy) { due = true; return; }
    busy = true;
    try {
      const response = await fetch(window.location.href, {credentials: "same-origin"});
      if (response.ok) {
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = page.getElementById("run-live");
        if (fresh) document.getElementById("run-live").replaceChildren(...fresh.childNodes);
      }
    } catch (e) { /* the next event tries again */ }
    busy = false;
    if (due) { due = false; window.setTimeout(refresh, 1000); }
  }
  const soon = () => { if (!busy) refresh(); else due = true; };

  const source = new EventSource(live.dataset.streamUrl);
  source.addEventListener("step", soon);
  source.addEventListener("delta", soon);
  ["done", "cancelled", "awaiting_approval", "failed"].forEach((name) => source.addEventListener(name, () => {
    source.close();
    done = true;
    refresh();
  }));
  window.setInterval(() => { if (!done) soon(); }, 2000);  // the bar in flight grows between steps
})();
