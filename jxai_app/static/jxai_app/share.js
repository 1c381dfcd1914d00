// jxai share page (docs/data.md "Share links"): the snapshot of a shared conversation,
// read-only. The messages come through json_script (#jxai-share) and are drawn with the chat
// page's own rendering (render.js: Markdown through the same DOMPurify configuration, tool
// calls as cards with their results); no socket, no composer, no feedback.

import { assistantMessage, fillAssistant, userMessage } from "./render.js";

const data = JSON.parse(document.getElementById("jxai-share").textContent);
const transcript = document.getElementById("transcript");

for (const message of data.messages || []) {
  if (message.role === "user") {
    transcript.append(userMessage(message));
  } else if (message.role === "assistant") {
    const node = assistantMessage(null);
    fillAssistant(node, { ...message, reasoning: null, feedback: null,
      toolCalls: (message.toolCalls || []).map((call) => ({ ...call, approval: null })) }, null);
    transcript.append(node);
  }
  // Tool replies carry the results the cards already show.
}
for (const control of transcript.querySelectorAll(".feedback, .feedback-saved, .feedback-form")) control.remove();

// "Continue in my chat" posts the form with fetch: under the page's `Referrer-Policy:
// no-referrer` a plain form post would carry `Origin: null`, which the CSRF check refuses;
// this request alone sends its origin (and the referrer, to this server only).
const continueForm = document.getElementById("share-continue-form");
if (continueForm) {
  continueForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = continueForm.querySelector("button");
    button.disabled = true;
    const response = await fetch(continueForm.action, { method: "POST", body: new FormData(continueForm),
      credentials: "same-origin", referrerPolicy: "same-origin" }).catch(() => null);
    if (response && response.ok && response.redirected) window.location.assign(response.url);
    else window.location.reload();
  });
}
