// jxai chat page: the action bar under each message (docs/architecture.md "The chat page"): Copy, and on
// an assistant message the feedback controls (feedback.js). Copy puts the message's text on
// the clipboard: what the user typed, or the Markdown the model wrote.

import { actionButton, copyText, sourceOf } from "./code.js";
import { feedbackControls } from "./feedback.js";

/** The text "Copy" copies for a message element. */
function messageText(node) {
  const body = node.querySelector(":scope > .message-body");
  if (!body) return "";
  const source = sourceOf(body);
  return source !== null ? source : body.textContent;
}

/** The action bar for a new message element of `kind` ("user" | "assistant"). */
export function messageActions(kind) {
  const bar = document.createElement("div");
  bar.className = "message-actions";
  const copy = actionButton("Copy", "copy-message", "Copy this message");
  copy.addEventListener("click", () => copyText(messageText(copy.closest(".message")), copy));
  bar.append(copy);
  if (kind === "assistant") bar.append(...feedbackControls());
  return bar;
}
