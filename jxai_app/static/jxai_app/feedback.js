// jxai chat page: feedback on assistant messages (docs/store.md "Feedback"; frames in
// docs/websocket.md "Search, feedback and custom instructions").
//
// Thumbs up / down on each saved assistant message, and an optional comment. Pressing the
// pressed thumb again withdraws the feedback. The server answers every tab following the
// conversation with a `feedback` frame, which `showFeedback` draws.

import { actionButton } from "./code.js";

/** The controls of one assistant message: thumbs up, thumbs down, a status note, the comment form. */
export function feedbackControls() {
  // Words, not emoji: they read the same in every font (headless and minimal systems have no emoji font).
  const up = actionButton("Good", "feedback-up", "Good answer");
  const down = actionButton("Bad", "feedback-down", "Bad answer");
  for (const button of [up, down]) {
    button.classList.add("feedback");
    button.setAttribute("aria-pressed", "false");
  }
  const saved = document.createElement("span");
  saved.className = "feedback-saved";
  saved.dataset.testid = "feedback-saved";
  saved.setAttribute("role", "status");
  const form = document.createElement("form");
  form.className = "feedback-form";
  form.hidden = true;
  const label = document.createElement("label");
  label.textContent = "What was good or bad about it? (optional)";
  const comment = document.createElement("textarea");
  comment.rows = 2;
  comment.dataset.testid = "feedback-comment";
  label.append(comment);
  const send = actionButton("Send feedback", "feedback-send", "Send the comment");
  send.type = "submit";
  const close = actionButton("Close", "feedback-close", "Close without a comment");
  close.classList.add("feedback-close");
  form.append(label, send, close);
  return [up, down, saved, form];
}

/** Press the thumb of `rating` ("up" | "down" | "") on a message element, release the other. */
function pressRating(node, rating) {
  node.dataset.feedback = rating;
  for (const button of node.querySelectorAll(":scope > .message-actions > .feedback")) {
    button.setAttribute("aria-pressed", String(button.dataset.testid === `feedback-${rating}`));
  }
}

/**
 * Show a message's saved feedback (`{rating, comment}` or null) on its element (`data-feedback`,
 * `data-feedback-comment`); `saved`: it is the server's answer to a `feedback` request (a
 * short note says so).
 */
export function showFeedback(node, feedback, saved = false) {
  pressRating(node, feedback ? feedback.rating : "");
  node.dataset.feedbackComment = feedback ? feedback.comment || "" : "";
  const note = node.querySelector(":scope > .message-actions > .feedback-saved");
  if (note) note.textContent = saved ? (feedback ? "Feedback saved." : "Feedback withdrawn.") : "";
  const comment = node.querySelector(":scope > .message-actions [data-testid='feedback-comment']");
  if (comment && document.activeElement !== comment) comment.value = feedback ? feedback.comment || "" : "";
}

/**
 * Sends the feedback the user gives in `root` (the transcript).
 * Options: request(frame) sends a frame; maxChars is the comment's length limit.
 */
export class FeedbackControls {
  constructor(root, { request, maxChars }) {
    this.request = request;
    root.addEventListener("click", (event) => {
      const button = event.target.closest("button.feedback, button.feedback-close");
      const node = button && button.closest(".message.assistant[data-message-id]");
      if (!node) return;
      const form = node.querySelector(":scope > .message-actions > .feedback-form");
      if (button.classList.contains("feedback-close")) {
        form.hidden = true;
        return;
      }
      const rating = button.dataset.testid === "feedback-up" ? "up" : "down";
      const withdraw = node.dataset.feedback === rating;
      this.give(node, withdraw ? null : rating, "");
      form.hidden = withdraw;
      if (!withdraw) {
        const comment = form.querySelector("textarea");
        if (maxChars) comment.maxLength = maxChars;
        comment.focus();
      }
    });
    root.addEventListener("submit", (event) => {
      const form = event.target.closest(".feedback-form");
      const node = form && form.closest(".message.assistant[data-message-id]");
      if (!node) return;
      event.preventDefault();
      this.give(node, node.dataset.feedback || "down", form.querySelector("textarea").value);
      form.hidden = true;
    });
  }

  /** Send the feedback; the thumb shows at once, the rest once the server's `feedback` frame says it is saved. */
  give(node, rating, comment) {
    const frame = { type: "feedback", messageId: Number(node.dataset.messageId), rating, comment };
    if (!this.request(frame)) return;
    pressRating(node, rating || "");
    const note = node.querySelector(":scope > .message-actions > .feedback-saved");
    if (note) note.textContent = "";
  }
}
