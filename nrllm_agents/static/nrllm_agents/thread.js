/* A conversation, progressively enhanced (the forms post without JavaScript). With it, the
 * run in flight is followed on its own live stream, as on a run's page: "delta" events grow
 * the answer being written, Stop posts the playground's cancel, and the page reloads when
 * the run ends (the server renders the transcript the next run starts from). A message is
 * posted with fetch; the page reloads to follow the run that answers it. */
(function () {
  "use strict";

  const FINAL_EVENTS = ["done", "cancelled", "awaiting_approval", "failed"];

  function say(text, level) {
    let list = document.getElementById("messages");
    if (!list) {
      list = document.createElement("ul");
      list.className = "messages";
      list.id = "messages";
      document.querySelector("main").before(list);
    }
    const li = document.createElement("li");
    li.className = `message ${level || "info"}`;
    li.textContent = text;
    list.replaceChildren(li);
  }

  async function postForm(form) {
    const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    const response = await fetch(form.action, {
      method: "POST", body: new FormData(form), credentials: "same-origin",
      headers: {"Accept": "application/json", "X-CSRFToken": token},
    });
    let data = {};
    try { data = await response.json(); } catch (e) { /* not JSON: keep the status */ }
    return {ok: response.ok, status: response.status, data};
  }

  const messageForm = document.getElementById("message-form");
  if (messageForm) {
    messageForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      messageForm.querySelectorAll(".js-error").forEach((n) => n.remove());
      const button = document.getElementById("send-button");
      button.disabled = true;
      try {
        const {ok, status, data} = await postForm(messageForm);
        if (ok) { window.location.reload(); return; }
        if (status === 400 && data.errors) {
          Object.entries(data.errors).forEach(([field, errors]) => {
            const box = messageForm.querySelector(`[data-field="${field}"]`) || messageForm;
            const list = document.createElement("ul");
            list.className = "errorlist js-error";
            errors.forEach((e) => { const li = document.createElement("li"); li.textContent = e; list.append(li); });
            box.append(list);
          });
        } else {
          say(data.message || data.detail || `Not sent (HTTP ${status}).`, status === 409 ? "warning" : "error");
        }
      } catch (e) {
        say("Could not reach the server.", "error");
      } finally {
        button.disabled = false;
      }
    });
  }

  const chat = document.getElementById("chat");
  if (!chat || !chat.dataset.runId) return;
  const liveText = document.getElementById("live-text");
  const liveStatus = document.getElementById("live-status");
  let chars = 0;
  let answeredRound = -1;

  const stopForm = document.getElementById("stop-form");
  if (stopForm) {
    stopForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const {ok, status, data} = await postForm(stopForm);
        say(data.message || data.detail || `HTTP ${status}`, ok ? "success" : "warning");
      } catch (e) {
        say("Could not reach the server.", "error");
      }
    });
  }

  const es = new EventSource(`${chat.dataset.streamUrl}?after=-1`);
  es.addEventListener("step", (event) => {
    const step = JSON.parse(event.data);
    liveStatus.textContent = step.kind === "cancelled" ? "cancelled" : "running";
    liveStatus.className = `badge status-${liveStatus.textContent}`;
    if (step.kind === "llm") { answeredRound = Math.max(answeredRound, step.round); chars = 0; liveText.textContent = ""; }
    if (step.kind === "tool") liveText.textContent = `(${(step.payload || {}).name || "a tool"} …)`;
  });
  es.addEventListener("delta", (event) => {
    const delta = JSON.parse(event.data);
    if (delta.round <= answeredRound) return;
    const piece = Array.from(delta.text || "");
    if (delta.offset < chars) piece.splice(0, chars - delta.offset);  // a repeat
    liveText.textContent += piece.join("");
    chars = Math.max(chars, delta.offset + Array.from(delta.text || "").length);
  });
  FINAL_EVENTS.forEach((name) => es.addEventListener(name, () => {
    es.close();
    window.location.reload();  // the server renders the transcript as it now stands
  }));
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) say("The live stream is unavailable; reload the page.", "warning");
  };
})();
