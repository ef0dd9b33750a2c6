/* What the playground, the conversations and the admin's run page share (window.nrllmConsole):
 * the one way a duration reads (as web/display.duration writes it on the server), the one way
 * an instant reads (the browser's time zone, named; the exact UTC instant on hover) and a
 * relative label that ticks, and a tool call's progress as the live stream's "progress"
 * events carry it ({name, progress, total, message}): "7 / 20 step 7 of 20" and a bar. */
(function () {
  "use strict";
  const number = (n) => (Number.isInteger(n) ? String(n) : String(Math.round(n * 100) / 100));

  function duration(ms) {
    if (ms === null || ms === undefined) return "";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
    const seconds = Math.round(ms / 1000);
    if (seconds < 3600) {
      const rest = seconds % 60;
      return `${Math.floor(seconds / 60)} min${rest ? ` ${rest} s` : ""}`;
    }
    const minutes = Math.round(seconds / 60), rest = minutes % 60;
    return `${Math.floor(minutes / 60)} h${rest ? ` ${rest} min` : ""}`;
  }

  // "3 Dec 2026, 14:17:49 CET", as web/display.absolute writes it (here in the browser's zone).
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const ZONE = new Intl.DateTimeFormat("en-GB", {timeZoneName: "short"});
  const pad = (n) => String(n).padStart(2, "0");
  function absolute(date) {
    const zone = (ZONE.formatToParts(date).find((p) => p.type === "timeZoneName") || {}).value || "";
    return `${date.getDate()} ${MONTHS[date.getMonth()]} ${date.getFullYear()}, ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())} ${zone}`.trimEnd();
  }

  function relative(date) {
    const seconds = Math.floor((Date.now() - date.getTime()) / 1000);
    if (seconds < 5) return "just now";
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return `${Math.floor(seconds / 86400)} d ago`;
  }

  // Every <time datetime> in root: relative text ("data-absolute": the absolute time instead),
  // the absolute local time and the exact UTC instant on hover.
  function formatTimes(root) {
    (root || document).querySelectorAll("time[datetime]").forEach((node) => {
      const date = new Date(node.getAttribute("datetime"));
      if (isNaN(date)) return;
      node.textContent = "absolute" in node.dataset ? absolute(date) : relative(date);
      node.title = `${absolute(date)} (${date.toISOString()})`;
    });
  }

  function progressText(report) {
    const total = report.total !== null && report.total !== undefined ? ` / ${number(report.total)}` : "";
    const message = report.message ? ` ${report.message}` : "";
    return `${number(report.progress)}${total}${message}`;
  }

  function showProgress(target, report) {
    target.replaceChildren();
    const label = document.createElement("span");
    label.className = "progress-text";
    label.textContent = `${report.name}: ${progressText(report)}`;
    target.append(label);
    if (report.total) {
      const bar = document.createElement("progress");
      bar.max = report.total;
      bar.value = Math.min(report.progress, report.total);
      bar.className = "progress-bar";
      target.append(" ", bar);
    }
    target.dataset.progress = String(report.progress);
  }

  window.nrllmConsole = {duration, absolute, relative, formatTimes, progressText, showProgress};
  formatTimes();
  window.setInterval(() => formatTimes(), 1000);  // relative labels tick with the clock
})();
