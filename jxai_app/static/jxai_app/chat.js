// jxai chat page (SPEC §7 "Chat page"): conversation list, transcript, streaming answer,
// tool cards, Stop, Retry, model picker, token count, rename and delete.
//
// Talks only the websocket protocol of notes/ws-protocol.md. Starting data comes from the
// server through json_script (#jxai-initial); there is no inline script (CSP).

import {
  assistantMessage, el, fillAssistant, partsOf, renderMarkdown, setCardArguments, setCardName,
  setCardResult, setCardState, setNote, setReasoning, toolCard, userMessage,
} from "./render.js";
import { Connection, TurnSequencer } from "./socket.js";

const STOPPED_NOTE = "Stopped. This partial answer was not saved.";
const initial = JSON.parse(document.getElementById("jxai-initial").textContent);
const $ = (id) => document.getElementById(id);
const ui = {
  app: $("app"), list: $("conversation-list"), newChat: $("new-conversation"), toggle: $("toggle-sidebar"),
  title: $("conversation-title"), renameButton: $("rename"), deleteButton: $("delete"),
  renameForm: $("rename-form"), renameInput: $("rename-input"), renameCancel: $("rename-cancel"),
  connection: $("connection"), error: $("error"), errorText: $("error-text"), retry: $("retry"),
  dismiss: $("dismiss-error"), transcript: $("transcript"), empty: $("empty-state"), form: $("composer-form"),
  composer: $("composer"), send: $("send"), stop: $("stop"), model: $("model"), tokens: $("tokens"),
  warning: $("context-warning"), status: $("sr-status"),
};

const state = {
  currentId: initial.conversationId,
  conversations: new Map(),   // id -> conversation object (protocol shape)
  awaitingNew: false,         // a send with conversationId null is on its way
  streaming: false,
  stopping: false,
  turnPending: false,         // sent, and no event of the new turn seen yet
  modelShownFor: undefined,   // the conversation whose model the picker last showed
  live: new Map(),            // messageId -> {node, text, reasoning, cards: Map} of the running turn
  lastLive: null,
  renderQueued: new Set(),
};

const sequencer = new TurnSequencer({
  apply: (item) => applyItem(item),
  requestResync: (turnId, afterSeq) =>
    connection.send({ type: "resync", conversationId: state.currentId, turnId, afterSeq }),
});

const connection = new Connection(initial.wsPath, {
  onOpen: () => {
    connection.send({ type: "list" });
    if (state.currentId) connection.send({ type: "subscribe", conversationId: state.currentId });
  },
  onFrame: (frame) => handleFrame(frame),
  onState: (what, failures) => showConnection(what, failures),
  onGiveUp: () => checkStillLoggedIn(),
});

// ---------------------------------------------------------------------------------------
// Frames from the server

function handleFrame(frame) {
  switch (frame.type) {
    case "events":
      if (adoptNewConversation(frame.conversationId) || frame.conversationId === state.currentId) {
        if (sequencer.accepts(frame.turnId)) {
          state.turnPending = false;
          setStreaming(true);
        }
        sequencer.feed(frame.turnId, frame.items);
      }
      break;
    case "replay":
      if (frame.conversationId === state.currentId) sequencer.feed(frame.turnId, frame.items);
      break;
    case "snapshot":
      if (frame.conversationId === state.currentId) applySnapshot(frame);
      break;
    case "message_saved":
      if (adoptNewConversation(frame.conversationId) || frame.conversationId === state.currentId) {
        applySavedMessage(frame.message);
      }
      break;
    case "conversation":
      upsertConversation(frame.conversation);
      break;
    case "conversation_deleted":
      removeConversation(frame.conversationId);
      break;
    case "conversations":
      replaceConversations(frame.items || []);
      break;
    case "error":
      handleErrorFrame(frame);
      break;
    default:
      break; // unknown frame types are ignored (forward compatibility)
  }
}

/** A send without a conversation id learns its new id from the first frame naming one. */
function adoptNewConversation(conversationId) {
  if (!state.awaitingNew || !conversationId || state.currentId) return false;
  state.awaitingNew = false;
  state.currentId = conversationId;
  history.pushState({ conversationId }, "", `/c/${conversationId}`);
  renderList();
  return true;
}

function applySnapshot(frame) {
  const conversation = frame.conversation;
  if (conversation) upsertConversation(conversation);
  clearTranscript();
  for (const message of frame.messages || []) applySavedMessage(message);
  const turn = frame.turn;
  if (turn && sequencer.accepts(turn.turnId)) {
    sequencer.reset(turn.turnId, 0);
    setStreaming(true);
    sequencer.feed(turn.turnId, turn.items || []);
  } else {
    sequencer.reset(null, 0);
    setStreaming(Boolean(conversation && conversation.status === "streaming"));
  }
  if (conversation && conversation.status === "error" && conversation.lastError) {
    showError(conversation.lastError.message || "The last answer failed.", { retry: true });
  }
  scrollToEnd(true);
}

function applySavedMessage(message) {
  if (!message || message.id == null) return;
  if (message.role === "user") {
    const existing = findMessage(message.id);
    if (existing) return;
    const pending = ui.transcript.querySelector(".message.user.pending");
    if (pending) {
      pending.classList.remove("pending");
      pending.dataset.messageId = String(message.id);
      placeMessage(pending);
    } else {
      placeMessage(userMessage(message));
    }
  } else if (message.role === "assistant") {
    const live = state.live.get(String(message.id));
    const node = live ? live.node : findMessage(message.id) || assistantMessage(message.id);
    if (live) live.saved = true;
    fillAssistant(node, message);
    placeMessage(node);
    hideIfEmpty(node);
  } else if (message.role === "tool" && message.toolCallId) {
    const card = findCard(message.toolCallId);
    if (card && card.dataset.state !== "success" && card.dataset.state !== "failure") {
      let result = message.content;
      try {
        result = JSON.parse(message.content);
      } catch {
        /* plain text result */
      }
      const success = result && typeof result === "object" && "success" in result ? Boolean(result.success) : null;
      setCardResult(card, result, success);
    }
  }
  updateEmptyState();
  scrollToEnd(false);
}

// ---------------------------------------------------------------------------------------
// Turn events (items of `events`, `replay` and snapshot turns)

function liveFor(messageId) {
  const key = messageId == null ? state.lastLive && state.lastLive.key : String(messageId);
  if (key && state.live.has(key)) return state.live.get(key);
  let node = key ? findMessage(key) : null;
  if (node) {
    // A saved copy (e.g. the snapshot's placeholder as of its last flush) is rebuilt from
    // the turn's events, which hold everything from the start.
    const parts = partsOf(node);
    parts.body.replaceChildren();
    parts.calls.replaceChildren();
    setReasoning(node, "", false);
    setNote(node, "");
  } else {
    node = assistantMessage(key);
    placeMessage(node);
  }
  node.classList.add("streaming");
  node.setAttribute("aria-busy", "true");
  const live = { key, node, text: "", reasoning: "", cards: new Map(), saved: false };
  if (key) state.live.set(key, live);
  state.lastLive = live;
  updateEmptyState();
  return live;
}

function applyItem(item) {
  const event = item.event || {};
  switch (event.type) {
    case "round_start":
      break;
    case "delta": {
      const live = liveFor(item.messageId);
      live.text += event.content || "";
      queueRender(live);
      break;
    }
    case "reasoning": {
      const live = liveFor(item.messageId);
      live.reasoning += event.content || "";
      setReasoning(live.node, live.reasoning, true);
      break;
    }
    case "tool_call_start": {
      const live = liveFor(item.messageId);
      const card = toolCard(event.id, event.name);
      live.cards.set(event.id, card);
      partsOf(live.node).calls.append(card);
      break;
    }
    case "tool_call_delta": {
      const card = findCard(event.id);
      if (card) setCardArguments(card, (card.dataset.args || "") + (event.args || ""), false);
      break;
    }
    case "tool_call_end": {
      const card = findCard(event.id);
      if (card) {
        setCardArguments(card, card.dataset.args || "", true);
        setCardState(card, "pending");
      }
      break;
    }
    case "tool_start": {
      let card = findCard(event.callId);
      if (!card) {
        card = toolCard(event.callId, event.name);
        partsOf(liveFor(item.messageId).node).calls.append(card);
      }
      setCardName(card, event.name);
      setCardArguments(card, event.arguments || "", true);
      setCardState(card, "running");
      break;
    }
    case "tool_result": {
      const card = findCard(event.callId);
      if (card) setCardResult(card, event.result, event.success);
      break;
    }
    case "done":
      finishRound(item.messageId, event.stopReason);
      break;
    case "error":
      finishRound(item.messageId, "error");
      showError(event.message || "The model failed to answer.", { retry: true });
      break;
    case "round_end":
      break;
    case "turn_end":
      endTurn(event);
      break;
    default:
      break; // usage and future event types: nothing to draw (tokens come with `conversation`)
  }
  scrollToEnd(false);
}

function queueRender(live) {
  if (state.renderQueued.has(live)) return;
  state.renderQueued.add(live);
  requestAnimationFrame(() => {
    state.renderQueued.delete(live);
    const { body } = partsOf(live.node);
    renderMarkdown(body, live.text);
    body.hidden = !live.text;
    scrollToEnd(false);
  });
}

function finishRound(messageId, stopReason) {
  const key = messageId == null ? state.lastLive && state.lastLive.key : String(messageId);
  const live = key ? state.live.get(key) : state.lastLive;
  if (!live) return;
  for (const card of live.cards.values()) {
    if (card.dataset.state === "streaming") setCardState(card, "pending");
  }
  if (stopReason === "cancelled") setNote(live.node, STOPPED_NOTE, "stopped");
  else if (stopReason === "error") {
    live.node.classList.add("failed");
    setNote(live.node, "This answer failed and was not saved.", "error");
  } else if (stopReason === "length") setNote(live.node, "The answer was cut off (length limit).", "warning");
  else if (stopReason === "content_filter") setNote(live.node, "The provider filtered this answer.", "warning");
}

function endTurn(event) {
  for (const live of state.live.values()) {
    if (live.text) {
      const { body } = partsOf(live.node);
      renderMarkdown(body, live.text);
      body.hidden = false;
    }
    live.node.classList.remove("streaming");
    live.node.removeAttribute("aria-busy");
    if (live.reasoning) setReasoning(live.node, live.reasoning, false);
    for (const card of live.cards.values()) {
      if (card.dataset.state !== "success" && card.dataset.state !== "failure") setCardState(card, "failure");
    }
    hideIfEmpty(live.node);
  }
  const last = state.lastLive;
  const outcome = event.outcome;
  if (outcome === "cancelled") {
    // The partial answer (if any) stays on screen, marked; the server dropped it.
    if (last && !partsOf(last.node).note.textContent) setNote(last.node, STOPPED_NOTE, "stopped");
  } else if (outcome === "error") {
    if (ui.error.hidden) showError(event.message || "The model failed to answer.", { retry: true });
  } else if ((outcome === "empty" || outcome === "cap_failed") && event.message) {
    const node = last ? last.node : assistantMessage(null);
    if (!last) placeMessage(node);
    node.hidden = false;
    setNote(node, event.message, "warning");
  }
  state.live.clear();
  state.lastLive = null;
  sequencer.finish();
  setStreaming(false);
  announce(outcome === "complete" || outcome === "cap_partial" ? "Answer complete." : event.message || "");
}

// ---------------------------------------------------------------------------------------
// Transcript helpers

function findMessage(id) {
  return ui.transcript.querySelector(`:scope > .message[data-message-id="${CSS.escape(String(id))}"]`);
}

function findCard(callId) {
  if (!callId) return null;
  return ui.transcript.querySelector(`.tool-call[data-call-id="${CSS.escape(callId)}"]`);
}

/** Keep the transcript in message id order; elements without an id go last. */
function placeMessage(node) {
  const id = Number(node.dataset.messageId);
  if (!node.dataset.messageId || Number.isNaN(id)) {
    if (node.parentNode !== ui.transcript) ui.transcript.append(node);
    return;
  }
  for (const other of ui.transcript.querySelectorAll(":scope > .message")) {
    if (other === node) continue;
    const otherId = Number(other.dataset.messageId);
    if (!other.dataset.messageId || Number.isNaN(otherId) || otherId > id) {
      if (node.nextSibling !== other) ui.transcript.insertBefore(node, other);
      return;
    }
  }
  ui.transcript.append(node);
}

function hideIfEmpty(node) {
  const { body, calls, reasoning, note } = partsOf(node);
  node.hidden = body.hidden && !calls.children.length && reasoning.hidden && note.hidden
    && !node.classList.contains("streaming");
}

function clearTranscript() {
  for (const node of ui.transcript.querySelectorAll(":scope > .message")) node.remove();
  state.live.clear();
  state.lastLive = null;
  updateEmptyState();
}

function updateEmptyState() {
  ui.empty.hidden = Boolean(ui.transcript.querySelector(":scope > .message"));
}

function scrollToEnd(force) {
  const box = ui.transcript;
  const nearEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 120;
  if (force || nearEnd) box.scrollTop = box.scrollHeight;
}

function announce(text) {
  ui.status.textContent = text || "";
}

// ---------------------------------------------------------------------------------------
// Conversation list and header

function upsertConversation(conversation) {
  if (!conversation || !conversation.id) return;
  const previous = state.conversations.get(conversation.id) || {};
  state.conversations.set(conversation.id, { ...previous, ...conversation });
  adoptNewConversation(conversation.id);
  renderList();
  if (conversation.id === state.currentId) {
    renderHeader();
    if (conversation.status === "streaming") setStreaming(true);
    else if (state.streaming && !state.turnPending && !state.live.size && !sequencer.turnId) setStreaming(false);
    if (conversation.status === "error" && conversation.lastError && ui.error.hidden) {
      showError(conversation.lastError.message || "The last answer failed.", { retry: true });
    }
  }
}

function replaceConversations(items) {
  const fresh = new Map();
  for (const item of items) if (item && item.id) fresh.set(item.id, item);
  if (state.currentId && !fresh.has(state.currentId) && state.conversations.has(state.currentId)) {
    fresh.set(state.currentId, state.conversations.get(state.currentId));
  }
  state.conversations = fresh;
  renderList();
  renderHeader();
}

function removeConversation(conversationId) {
  state.conversations.delete(conversationId);
  renderList();
  if (conversationId === state.currentId) {
    startNewChat();
    announce("Conversation deleted.");
  }
}

function sortedConversations() {
  return [...state.conversations.values()].sort((a, b) => String(b.updatedAt).localeCompare(String(a.updatedAt)));
}

function renderList() {
  const items = sortedConversations().map((conversation) => {
    const link = el("a", "conversation-link", null, "conversation-link");
    link.href = `/c/${conversation.id}`;
    link.dataset.conversationId = conversation.id;
    link.append(el("span", "conversation-link-title", conversation.title || "Untitled"));
    if (conversation.status === "streaming") link.append(el("span", "badge", "answering"));
    if (conversation.id === state.currentId) link.setAttribute("aria-current", "page");
    const li = el("li");
    li.append(link);
    return li;
  });
  ui.list.replaceChildren(...items);
}

function renderHeader() {
  const conversation = state.currentId ? state.conversations.get(state.currentId) : null;
  const title = conversation ? conversation.title || "Untitled" : "New chat";
  ui.title.textContent = title;
  document.title = `${title} · jxai`;
  ui.renameButton.hidden = !conversation;
  ui.deleteButton.hidden = !conversation;
  const shownFor = conversation ? conversation.id : null;
  if (state.modelShownFor !== shownFor) {
    // The picker follows the conversation when it is opened, then stays as the user sets it.
    state.modelShownFor = shownFor;
    const alias = conversation && conversation.model ? conversation.model : initial.defaultModel;
    if ([...ui.model.options].some((o) => o.value === alias)) ui.model.value = alias;
  }
  renderTokens(conversation);
}

function renderTokens(conversation) {
  if (!conversation || !conversation.tokenCount) {
    ui.tokens.textContent = "";
    ui.warning.hidden = true;
    return;
  }
  const fmt = new Intl.NumberFormat();
  const windowSize = conversation.contextWindow;
  ui.tokens.textContent = windowSize
    ? `${fmt.format(conversation.tokenCount)} / ${fmt.format(windowSize)} tokens`
    : `${fmt.format(conversation.tokenCount)} tokens`;
  ui.warning.hidden = !conversation.contextWarning;
}

function renderModels() {
  const options = (initial.models || []).map((model) => {
    const option = el("option", "", model.label || model.alias);
    option.value = model.alias;
    if (model.alias === initial.defaultModel) option.selected = true;
    return option;
  });
  ui.model.replaceChildren(...options);
  ui.model.disabled = options.length <= 1;
}

// ---------------------------------------------------------------------------------------
// Actions

function setStreaming(on) {
  state.streaming = on;
  if (!on) {
    state.stopping = false;
    state.turnPending = false;
  }
  ui.stop.hidden = !on;
  ui.stop.disabled = state.stopping;
  ui.stop.textContent = state.stopping ? "Stopping…" : "Stop";
  ui.send.hidden = on;
  ui.app.classList.toggle("is-streaming", on);
}

function sendMessage() {
  const text = ui.composer.value;
  if (!text.trim() || state.streaming) return;
  if (initial.maxMessageChars && text.length > initial.maxMessageChars) {
    showError(`Your message is longer than ${initial.maxMessageChars} characters.`, { retry: false });
    return;
  }
  const frame = { type: "send", conversationId: state.currentId, text, model: ui.model.value || null };
  if (!connection.send(frame)) {
    showError("Not connected to the server. Your message is kept; try again in a moment.", { retry: false });
    return;
  }
  hideError();
  state.awaitingNew = state.currentId === null;
  state.turnPending = true;
  ui.composer.value = "";
  const pending = userMessage({ id: null, content: text });
  pending.classList.add("pending");
  placeMessage(pending);
  updateEmptyState();
  setStreaming(true);
  scrollToEnd(true);
}

function stopTurn() {
  if (!state.streaming || !state.currentId) return;
  state.stopping = true;
  setStreaming(true);
  connection.send({ type: "cancel", conversationId: state.currentId });
}

function retryTurn() {
  if (!state.currentId || state.streaming) return;
  if (!connection.send({ type: "retry", conversationId: state.currentId })) {
    showError("Not connected to the server; try again in a moment.", { retry: true });
    return;
  }
  hideError();
  // The failed exchange (last user message and everything after it) is replaced by the retry.
  const users = ui.transcript.querySelectorAll(":scope > .message.user");
  const lastUser = users[users.length - 1];
  if (lastUser) {
    let node = lastUser.nextElementSibling;
    while (node) {
      const next = node.nextElementSibling;
      if (node.classList.contains("message")) node.remove();
      node = next;
    }
    lastUser.classList.add("pending");
    delete lastUser.dataset.messageId;
  }
  state.turnPending = true;
  setStreaming(true);
}

function handleErrorFrame(frame) {
  const problem = frame.problem || {};
  const text = problem.detail || frame.message || problem.title || "The server refused that.";
  if (frame.request === "send") {
    // Nothing is lost: the refused text goes back into the composer.
    const pending = ui.transcript.querySelector(".message.user.pending");
    if (pending) {
      if (!ui.composer.value) ui.composer.value = pending.querySelector(".message-body").textContent;
      pending.remove();
    }
    state.awaitingNew = false;
    state.turnPending = false;
    setStreaming(false);
    updateEmptyState();
  } else if (frame.request === "retry") {
    state.turnPending = false;
    setStreaming(false);
    if (state.currentId) connection.send({ type: "subscribe", conversationId: state.currentId });
  } else if (frame.request === "subscribe" && frame.conversationId === state.currentId) {
    startNewChat();
  }
  showError(text, { retry: false });
}

function showError(text, { retry }) {
  ui.errorText.textContent = text;
  ui.retry.hidden = !retry;
  ui.error.hidden = false;
}

function hideError() {
  ui.error.hidden = true;
}

function startNewChat() {
  state.currentId = null;
  state.awaitingNew = false;
  sequencer.reset(null, 0);
  clearTranscript();
  hideError();
  setStreaming(false);
  if (window.location.pathname !== "/") history.pushState({ conversationId: null }, "", "/");
  renderList();
  renderHeader();
  ui.composer.focus();
}

function openConversation(conversationId, { push }) {
  if (conversationId === state.currentId) return;
  state.currentId = conversationId;
  state.awaitingNew = false;
  sequencer.reset(null, 0);
  clearTranscript();
  hideError();
  setStreaming(false);
  if (push) history.pushState({ conversationId }, "", `/c/${conversationId}`);
  renderList();
  renderHeader();
  connection.send({ type: "subscribe", conversationId });
}

/** Narrow screens: fold the conversation list away again. */
function closeSidebar() {
  ui.app.classList.remove("sidebar-open");
  ui.toggle.setAttribute("aria-expanded", "false");
}

function beginRename() {
  const conversation = state.conversations.get(state.currentId);
  if (!conversation) return;
  ui.renameInput.value = conversation.title || "";
  ui.renameForm.hidden = false;
  ui.title.hidden = true;
  ui.renameInput.focus();
  ui.renameInput.select();
}

function endRename() {
  ui.renameForm.hidden = true;
  ui.title.hidden = false;
  ui.renameButton.focus();
}

function showConnection(what, failures) {
  document.documentElement.dataset.connection = what;   // "connecting" | "open" | "closed"
  if (what === "open") {
    ui.connection.hidden = true;
    ui.connection.textContent = "";
  } else if (what === "closed" || failures > 0) {
    ui.connection.hidden = false;
    ui.connection.textContent = "Connection lost. Reconnecting…";
  }
}

async function checkStillLoggedIn() {
  try {
    const response = await fetch(window.location.pathname, { redirect: "manual", credentials: "same-origin" });
    if (response.type === "opaqueredirect" || response.status === 302) window.location.reload();
  } catch {
    /* the server is down: keep trying to reconnect */
  }
}

// ---------------------------------------------------------------------------------------
// Wiring

ui.form.addEventListener("submit", (event) => {
  event.preventDefault();
  sendMessage();
});
ui.composer.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    sendMessage();
  } else if (event.key === "Escape" && state.streaming) {
    event.preventDefault();
    stopTurn();
  }
});
ui.stop.addEventListener("click", stopTurn);
ui.retry.addEventListener("click", retryTurn);
ui.dismiss.addEventListener("click", hideError);
ui.newChat.addEventListener("click", () => {
  startNewChat();
  closeSidebar();
});
ui.toggle.addEventListener("click", () => {
  const open = ui.app.classList.toggle("sidebar-open");
  ui.toggle.setAttribute("aria-expanded", String(open));
});
ui.list.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-conversation-id]");
  if (!link || event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  openConversation(link.dataset.conversationId, { push: true });
  closeSidebar();
});
window.addEventListener("popstate", () => {
  const match = /^\/c\/([0-9a-f-]{36})$/i.exec(window.location.pathname);
  if (match) openConversation(match[1], { push: false });
  else if (state.currentId) startNewChat();
});
ui.renameButton.addEventListener("click", beginRename);
ui.renameCancel.addEventListener("click", endRename);
ui.renameInput.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    endRename();
  }
});
ui.renameForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const title = ui.renameInput.value.trim();
  if (title && state.currentId) connection.send({ type: "rename", conversationId: state.currentId, title });
  endRename();
});
ui.deleteButton.addEventListener("click", () => {
  const conversation = state.conversations.get(state.currentId);
  if (!conversation) return;
  if (window.confirm(`Delete “${conversation.title || "Untitled"}”? This cannot be undone.`)) {
    connection.send({ type: "delete", conversationId: state.currentId });
  }
});

renderModels();
for (const conversation of initial.conversations || []) state.conversations.set(conversation.id, conversation);
if (initial.conversation) state.conversations.set(initial.conversation.id, initial.conversation);
renderList();
renderHeader();
updateEmptyState();
setStreaming(false);
connection.connect();
ui.composer.focus();
