// jxai chat page: the transcript, kept in message-id order, fed by saved messages
// (`message_saved`, snapshots) and by a turn's events in seq order (notes/ws-protocol.md).
//
// A running turn's assistant messages are "live": their text and reasoning build up from
// `delta`/`reasoning` events and re-render (Markdown → sanitiser) at most once a frame; tool
// cards follow `tool_call_*`, `tool_start` and `tool_result`. A saved copy of a message the
// turn's events also describe (a snapshot's placeholder, flushed every 2 s) is rebuilt from
// the events, which hold everything from the turn's start.

import {
  assistantMessage, fillAssistant, partsOf, renderMarkdown, setCardApproval, setCardArguments, setCardName,
  setCardResult, setCardState, setNote, setReasoning, toolCard, userMessage,
} from "./render.js";
import { openEditor, setBranchControls } from "./branches.js";
import { showAttachments } from "./attachments.js";

export const STOPPED_NOTE = "Stopped. This partial answer was not saved.";

const ROUND_NOTES = {
  cancelled: [STOPPED_NOTE, "stopped"],
  error: ["This answer failed and was not saved.", "error"],
  length: ["The answer was cut off (length limit).", "warning"],
  content_filter: ["The provider filtered this answer.", "warning"],
};

export class Transcript {
  /**
   * @param {Element} root the transcript element (messages are its direct children)
   * @param {Element} emptyState shown while there is no message
   * @param {{onTurnError: function(string), onTurnEnd: function(object),
   *          onDecide: function(string, boolean, string), onSwitch: function(number),
   *          onEdit: function(number, string), onRegenerate: function(number)}} hooks
   *   (onDecide answers an approval card; the last three: branches, see branches.js)
   */
  constructor(root, emptyState, hooks) {
    this.root = root;
    this.emptyState = emptyState;
    this.hooks = hooks;
    this.live = new Map(); // messageId -> {key, node, text, reasoning, cards}
    this.lastLive = null;
    this.renderQueued = new Set();
    // Following the end: decided by the reader's own scrolling, not by where a block that just
    // came left the view (a tall block would otherwise look like the reader scrolled away).
    this.following = true;
    this.lastTop = root.scrollTop;
    root.addEventListener("scroll", () => this.noteScroll(), { passive: true });
  }

  // ------------------------------------------------------------------ saved messages

  /**
   * Remove every message. `keepPending`: keep this tab's own message that waits for the
   * server's answer (a snapshot may arrive first; a refusal then still gives its text back).
   */
  clear({ keepPending = false } = {}) {
    const pending = keepPending ? this.pendingUser() : null;
    for (const node of this.root.querySelectorAll(":scope > .message")) if (node !== pending) node.remove();
    this.live.clear();
    this.lastLive = null;
    this.updateEmptyState();
  }

  /** A saved `message` object: add it, or complete the element already showing it. */
  applySaved(message) {
    if (!message || message.id == null) return;
    if (message.role === "user") {
      const known = this.find(message.id);
      if (known) {
        this.decorate(known, message);
        return;
      }
      const pending = this.pendingUser();
      // Only this tab's own message confirms its pending one: another tab of the same
      // conversation may have sent first (this tab's send is then refused with `conflict`).
      let node = pending;
      if (pending && pending.querySelector(".message-body").textContent === (message.content || "")) {
        pending.classList.remove("pending");
        pending.dataset.messageId = String(message.id);
      } else {
        node = userMessage(message);
      }
      this.place(node);
      this.decorate(node, message);
    } else if (message.role === "assistant") {
      const live = this.live.get(String(message.id));
      const node = live ? live.node : this.find(message.id) || assistantMessage(message.id);
      fillAssistant(node, message, this.hooks.onDecide);
      if (message.status === "streaming") node.classList.add("streaming");
      this.place(node);
      if (message.status !== "streaming") this.decorate(node, message);
      this.hideIfEmpty(node);
    } else if (message.role === "tool" && message.toolCallId) {
      this.applyToolReply(message);
    }
    this.updateEmptyState();
    this.scrollToEnd(false);
  }

  /** Branch controls (branches.js); Regenerate goes on the message that starts an answer. */
  decorate(node, message) {
    if (message.role === "user") showAttachments(node, message.attachments);
    const parent = message.parentId == null ? null : this.find(message.parentId);
    setBranchControls(node, message, {
      answer: message.role === "assistant" && Boolean(parent && parent.classList.contains("user")),
      onSwitch: (id) => this.hooks.onSwitch(id),
      onEdit: (target) => openEditor(target, (text) => this.hooks.onEdit(message.id, text)),
      onRegenerate: (id) => this.hooks.onRegenerate(id),
    });
  }

  applyToolReply(message) {
    const card = this.findCard(message.toolCallId);
    if (!card || card.dataset.state === "success" || card.dataset.state === "failure") return;
    let result = message.content;
    try {
      result = JSON.parse(message.content);
    } catch {
      /* a plain text result */
    }
    const success = result && typeof result === "object" && "success" in result ? Boolean(result.success) : null;
    setCardResult(card, result, success);
  }

  // ------------------------------------------------------------------ the user's side

  /** Show what the user just sent until the server saves it (`message_saved`). */
  addPending(text) {
    const node = userMessage({ id: null, content: text });
    node.classList.add("pending");
    this.place(node);
    this.updateEmptyState();
    this.scrollToEnd(true);
  }

  pendingUser() {
    return this.root.querySelector(":scope > .message.user.pending");
  }

  /** The server refused the send: remove the pending message and give back its text. */
  takeBackPending() {
    const pending = this.pendingUser();
    if (!pending) return null;
    const text = pending.querySelector(".message-body").textContent;
    pending.remove();
    this.updateEmptyState();
    return text;
  }

  /** Retry: the failed exchange (the last user message and what follows) is replaced. */
  dropLastExchange() {
    const users = this.root.querySelectorAll(":scope > .message.user");
    const lastUser = users[users.length - 1];
    if (!lastUser) return;
    let node = lastUser.nextElementSibling;
    while (node) {
      const next = node.nextElementSibling;
      if (node.classList.contains("message")) node.remove();
      node = next;
    }
    lastUser.classList.add("pending");
    delete lastUser.dataset.messageId;
  }

  // ------------------------------------------------------------------ turn events

  /** One item `{seq, messageId, event}` of the running turn, in seq order. */
  applyItem(item) {
    const event = item.event || {};
    switch (event.type) {
      case "delta": {
        const live = this.liveFor(item.messageId);
        live.text += event.content || "";
        this.queueRender(live);
        break;
      }
      case "reasoning": {
        const live = this.liveFor(item.messageId);
        live.reasoning += event.content || "";
        setReasoning(live.node, live.reasoning, true);
        break;
      }
      case "tool_call_start": {
        const live = this.liveFor(item.messageId);
        const card = toolCard(event.id, event.name);
        live.cards.set(event.id, card);
        partsOf(live.node).calls.append(card);
        break;
      }
      case "tool_call_delta": {
        const card = this.findCard(event.id);
        if (card) setCardArguments(card, (card.dataset.args || "") + (event.args || ""), false);
        break;
      }
      case "tool_call_end": {
        const card = this.findCard(event.id);
        if (card) {
          setCardArguments(card, card.dataset.args || "", true);
          setCardState(card, "pending");
        }
        break;
      }
      case "tool_start": {
        let card = this.findCard(event.callId);
        if (!card) {
          const live = this.liveFor(item.messageId);
          card = toolCard(event.callId, event.name);
          live.cards.set(event.callId, card);
          partsOf(live.node).calls.append(card);
        }
        setCardName(card, event.name);
        setCardArguments(card, event.arguments || "", true);
        setCardState(card, "running");
        break;
      }
      case "tool_result": {
        const card = this.findCard(event.callId);
        if (card) {
          setCardApproval(card, null, this.hooks.onDecide);
          setCardResult(card, event.result, event.success);
        }
        break;
      }
      case "tool_approval_request": {
        const card = this.findCard(event.callId);
        if (card) setCardApproval(card, { state: "awaiting_approval" }, this.hooks.onDecide);
        break;
      }
      case "done":
        this.finishRound(item.messageId, event.stopReason);
        break;
      case "error":
        this.finishRound(item.messageId, "error");
        this.hooks.onTurnError(event.message || "The model failed to answer.");
        break;
      case "turn_end":
        this.endTurn(event);
        this.hooks.onTurnEnd(event);
        break;
      default:
        break; // round_start/round_end, usage, and event types added later: nothing to draw
    }
    this.scrollToEnd(false);
  }

  liveFor(messageId) {
    const key = messageId == null ? this.lastLive && this.lastLive.key : String(messageId);
    if (key && this.live.has(key)) return this.live.get(key);
    let node = key ? this.find(key) : null;
    if (node) {
      const parts = partsOf(node);
      parts.body.replaceChildren();
      parts.calls.replaceChildren();
      setReasoning(node, "", false);
      setNote(node, "");
    } else {
      node = assistantMessage(key);
      this.place(node);
    }
    node.hidden = false;
    node.classList.add("streaming");
    node.setAttribute("aria-busy", "true");
    const live = { key, node, text: "", reasoning: "", cards: new Map() };
    if (key) this.live.set(key, live);
    this.lastLive = live;
    this.updateEmptyState();
    return live;
  }

  queueRender(live) {
    if (this.renderQueued.has(live)) return;
    this.renderQueued.add(live);
    requestAnimationFrame(() => {
      this.renderQueued.delete(live);
      this.renderText(live);
      this.scrollToEnd(false);
    });
  }

  renderText(live) {
    const { body } = partsOf(live.node);
    renderMarkdown(body, live.text);
    body.hidden = !live.text;
  }

  finishRound(messageId, stopReason) {
    const key = messageId == null ? this.lastLive && this.lastLive.key : String(messageId);
    const live = key ? this.live.get(key) : this.lastLive;
    if (!live) return;
    for (const card of live.cards.values()) {
      if (card.dataset.state === "streaming") setCardState(card, "pending");
    }
    if (stopReason === "error") live.node.classList.add("failed", "unsaved"); // not saved: nothing to rate
    if (ROUND_NOTES[stopReason]) setNote(live.node, ...ROUND_NOTES[stopReason]);
  }

  endTurn(event) {
    for (const live of this.live.values()) {
      if (live.text) this.renderText(live);
      live.node.classList.remove("streaming");
      live.node.removeAttribute("aria-busy");
      if (live.reasoning) setReasoning(live.node, live.reasoning, false);
      for (const card of live.cards.values()) {
        if (!["success", "failure", "approval", "denied", "expired"].includes(card.dataset.state)) setCardState(card, "failure");
      }
      this.hideIfEmpty(live.node);
    }
    const last = this.lastLive;
    if (event.outcome === "cancelled") {
      // The partial answer (if any) stays on screen, marked; the server dropped it.
      if (last && !partsOf(last.node).note.textContent) setNote(last.node, STOPPED_NOTE, "stopped");
      if (last) last.node.classList.add("unsaved"); // nothing to give feedback on

    } else if ((event.outcome === "empty" || event.outcome === "cap_failed") && event.message) {
      const node = last ? last.node : assistantMessage(null);
      if (!last) this.place(node);
      node.hidden = false;
      setNote(node, event.message, "warning");
    }
    this.live.clear();
    this.lastLive = null;
  }

  // ------------------------------------------------------------------ DOM helpers

  find(id) {
    return this.root.querySelector(`:scope > .message[data-message-id="${CSS.escape(String(id))}"]`);
  }

  findCard(callId) {
    if (!callId) return null;
    return this.root.querySelector(`.tool-call[data-call-id="${CSS.escape(callId)}"]`);
  }

  /** Keep messages in id order; elements without an id (pending) go last. */
  place(node) {
    const id = Number(node.dataset.messageId);
    if (!node.dataset.messageId || Number.isNaN(id)) {
      if (node.parentNode !== this.root) this.root.append(node);
      return;
    }
    for (const other of this.root.querySelectorAll(":scope > .message")) {
      if (other === node) continue;
      const otherId = Number(other.dataset.messageId);
      if (!other.dataset.messageId || Number.isNaN(otherId) || otherId > id) {
        if (node.nextSibling !== other) this.root.insertBefore(node, other);
        return;
      }
    }
    this.root.append(node);
  }

  hideIfEmpty(node) {
    const { body, calls, reasoning, note } = partsOf(node);
    node.hidden = body.hidden && !calls.children.length && reasoning.hidden && note.hidden
      && !node.classList.contains("streaming");
  }

  updateEmptyState() {
    this.emptyState.hidden = Boolean(this.root.querySelector(":scope > .message"));
  }

  /** Follow the end of the transcript while the reader follows it (or always, `force`). */
  scrollToEnd(force) {
    if (!force && !this.following) return;
    const box = this.root;
    box.scrollTop = box.scrollHeight;
    this.following = true;
    this.lastTop = box.scrollTop;
  }

  /** A scroll: near the end, the reader follows again; moving up away from it, they stop. */
  noteScroll() {
    const box = this.root;
    const top = box.scrollTop;
    if (box.scrollHeight - top - box.clientHeight < 120) this.following = true;
    else if (top < this.lastTop) this.following = false;
    this.lastTop = top;
  }
}
