// jxai chat page (docs/architecture.md "The chat page"): wires the parts together and runs the turn controls
// (send, Stop, Retry, errors, new chat, navigation). The parts: conversations.js (the paged
// list), header.js (title, rename, delete, model picker, token count), transcript.js and
// render.js (the messages), socket.js (the connection and the per-turn sequencer).
//
// Talks only the websocket protocol of docs/websocket.md. Starting data comes from the
// server through json_script (#jxai-initial); there is no inline script (CSP).

import { ConversationList } from "./conversations.js";
import { FeedbackControls, showFeedback } from "./feedback.js";
import { Header } from "./header.js";
import { SearchBox, messageFromHash } from "./search.js";
import { DataControls, SettingsDialog } from "./settings.js";
import { ShareDialog, ShareList } from "./sharing.js";
import { Connection, TurnSequencer } from "./socket.js";
import { reopenCardApproval } from "./render.js";
import { Transcript } from "./transcript.js";
import { AttachmentTray } from "./attachments.js";

const initial = JSON.parse(document.getElementById("jxai-initial").textContent);
const HOLD_SEND_MS = 15000;  // how long a send pressed while connecting waits for the socket (holdSend)
const $ = (id) => document.getElementById(id);
const ui = {
  app: $("app"), list: $("conversation-list"), loadMore: $("load-more"), newChat: $("new-conversation"),
  toggle: $("toggle-sidebar"),
  title: $("conversation-title"), temporaryMarker: $("temporary-marker"), renameButton: $("rename"), deleteButton: $("delete"),
  renameForm: $("rename-form"), renameInput: $("rename-input"), renameCancel: $("rename-cancel"),
  connection: $("connection"), saving: $("saving"), error: $("error"), errorText: $("error-text"), retry: $("retry"),
  dismiss: $("dismiss-error"), transcript: $("transcript"), empty: $("empty-state"), form: $("composer-form"),
  composer: $("composer"), send: $("send"), stop: $("stop"), model: $("model"), tokens: $("tokens"),
  warning: $("context-warning"), status: $("sr-status"),
  search: $("search"), searchResults: $("search-results"), nav: $("conversation-nav"),
  settings: { open: $("open-settings"), dialog: $("settings-dialog"), form: $("settings-form"),
    text: $("custom-instructions"), count: $("custom-instructions-count"), status: $("settings-status"),
    cancel: $("settings-cancel"), save: $("settings-save"), saved: $("settings-saved") },
  share: { open: $("share"), dialog: $("share-dialog"), form: $("share-form"), scope: $("share-scope"),
    groups: $("share-groups"), expiry: $("share-expiry"), status: $("share-status"), link: $("share-link"),
    linkRow: $("share-link-row"), copy: $("share-copy"), close: $("share-close"), create: $("share-create") },
  temporary: $("temporary-chat"), temporaryToggle: $("temporary-toggle"),
};

const state = {
  conflictShown: false,       // the error banner shows a send refused with `conflict`
  currentId: initial.conversationId,
  awaitingNew: false,         // a send with conversationId null is on its way
  streaming: false,
  stopping: false,
  turnPending: false,         // sent, and no event of the new turn seen yet
  adoptable: new Set(),       // conversations first seen while a new-chat send was pending
  reveal: messageFromHash(window.location.hash),  // a message to scroll to once the conversation shows
  revealSwitched: null,       // the message a switch_branch was sent for, to show it (revealMessage)
  sentFiles: [],              // the last send's attachments (attachments.js), back in the composer if refused
  heldSend: null,             // timer of a send pressed while the socket was connecting (holdSend)
};

const transcript = new Transcript(ui.transcript, ui.empty, {
  onTurnError: (message) => showError(message, { retry: true }),
  onTurnEnd: (event) => turnEnded(event),
  onDecide: (callId, approved, reason) => decide(callId, approved, reason),
  onSwitch: (messageId) => branchRequest({ type: "switch_branch", messageId }, false),
  onEdit: (messageId, text) => branchRequest({ type: "edit", messageId, text, model: header.model }, true),
  onRegenerate: (messageId) => branchRequest({ type: "regenerate", messageId, model: header.model }, true),
});

const sequencer = new TurnSequencer({
  apply: (item) => transcript.applyItem(item),
  requestResync: (turnId, afterSeq) =>
    connection.send({ type: "resync", conversationId: state.currentId, turnId, afterSeq }),
});

const conversations = new ConversationList(ui.list, ui.loadMore, {
  request: (frame) => connection.send(frame),
  current: () => state.currentId,
  onPick: (conversationId) => {
    openConversation(conversationId, { push: true });
    closeSidebar();
  },
});

const search = new SearchBox({ input: ui.search, results: ui.searchResults, nav: ui.nav }, {
  request: (frame) => connection.send(frame),
  onPick: (conversationId, messageId) => {
    state.reveal = messageId;
    if (conversationId === state.currentId) revealMessage();
    else openConversation(conversationId, { push: true });
    if (messageId !== null) history.replaceState({ conversationId }, "", `/c/${conversationId}#message-${messageId}`);
    closeSidebar();
  },
});

const settings = new SettingsDialog(ui.settings, {
  request: (frame) => connection.send(frame),
  maxChars: initial.customInstructionsMaxChars,
  announce: (text) => announce(text),
});

new ShareDialog(ui.share, { current: () => state.currentId });
const shareList = new ShareList({ list: $("share-list"), empty: $("share-list-empty") });
ui.settings.open.addEventListener("click", () => shareList.load());
new DataControls({ importInput: $("import-data"), importStatus: $("import-status"), deleteForm: $("delete-account-form"),
  confirm: $("delete-account-confirm"), deleteButton: $("delete-account"), deleteStatus: $("delete-account-status") }, {
  importUrl: initial.dataUrls.import, deleteUrl: initial.dataUrls.deleteAccount, loginUrl: initial.dataUrls.login,
  onImported: () => conversations.ask(null),
  announce: (text) => announce(text),
});

new FeedbackControls(ui.transcript, {
  request: (frame) => connection.send(frame),
  maxChars: initial.feedbackCommentMaxChars,
});

// docs/attachments.md "The page": the composer's files; a text-only model refuses images here.
const modelInfo = () => (initial.models || []).find((m) => m.alias === header.model) || {};
const tray = new AttachmentTray({
  form: ui.form, composer: ui.composer, input: $("attach-input"), picker: $("attach"), tray: $("attachment-tray"),
  csrf: (ui.form.querySelector("[name=csrfmiddlewaretoken]") || {}).value || "",
}, {
  takesImages: () => (modelInfo().input || ["text", "image"]).includes("image"),
  modelName: () => modelInfo().label || header.model || "This model",
  onError: (message) => showError(message, { retry: false }),
});

const header = new Header(ui, {
  models: initial.models,
  defaultModel: initial.defaultModel,
  onRename: (title) => connection.send({ type: "rename", conversationId: state.currentId, title }),
  onDelete: () => connection.send({ type: "delete", conversationId: state.currentId }),
});

const connection = new Connection(initial.wsPath, {
  onOpen: () => {
    conversations.connected();
    search.ask();
    if (state.currentId) connection.send({ type: "subscribe", conversationId: state.currentId });
    if (state.heldSend) {
      clearTimeout(state.heldSend);
      state.heldSend = null;
      hideError();
      sendMessage();
    }
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
        ui.saving.hidden = true;
        transcript.applySaved(frame.message);
      }
      break;
    case "saving":
      // The server keeps the finished answer and retries writing it (docs/turns.md).
      if (frame.conversationId === state.currentId) ui.saving.hidden = false;
      break;
    case "conversation":
      upsertConversation(frame.conversation);
      break;
    case "conversation_deleted":
      removeConversation(frame.conversationId);
      break;
    case "conversations":
      conversations.applyPage(frame);
      renderHeader();
      break;
    case "error":
      handleErrorFrame(frame);
      break;
    case "search_results":
      search.apply(frame);
      break;
    case "feedback":
      if (frame.conversationId === state.currentId) {
        const node = transcript.find(frame.messageId);
        if (node) showFeedback(node, frame.feedback, true);
      }
      break;
    case "instructions":
      settings.apply(frame);
      break;
    default:
      break; // unknown frame types are ignored (forward compatibility)
  }
}

/**
 * A send without a conversation id learns its new id from the first frame naming a
 * conversation this tab did not know (notices about the user's other conversations, sent to
 * every tab, name known ones).
 */
function adoptNewConversation(conversationId) {
  if (!state.awaitingNew || !conversationId || state.currentId) return false;
  if (conversations.has(conversationId) && !state.adoptable.has(conversationId)) return false;
  state.awaitingNew = false;
  state.adoptable.clear();
  state.currentId = conversationId;
  history.pushState({ conversationId }, "", `/c/${conversationId}`);
  conversations.render();
  return true;
}

function applySnapshot(frame) {
  const conversation = frame.conversation;
  if (conversation) upsertConversation(conversation);
  transcript.clear({ keepPending: state.turnPending });
  for (const message of frame.messages || []) transcript.applySaved(message);
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
  transcript.scrollToEnd(true);
  revealMessage();
}

/** Scroll to the message a search result (or the address's `#message-<id>`) named, and mark it.
 *  A message on another branch than the one shown is brought in first: one `switch_branch` to
 *  it (the server answers with a snapshot of that branch, which calls this again); when it is
 *  not there either (deleted, or a turn is running), the status line says so. */
function revealMessage() {
  if (state.reveal === null) return;
  const node = transcript.find(state.reveal);
  if (!node) {
    const wanted = state.reveal;
    const switched = state.revealSwitched === wanted;
    state.reveal = null;
    state.revealSwitched = null;
    if (!switched && state.currentId && !state.streaming && connection.send({
      type: "switch_branch", conversationId: state.currentId, messageId: wanted })) {
      state.reveal = state.revealSwitched = wanted;
    } else {
      announce("That message is not in the conversation as shown.");
    }
    return;
  }
  state.reveal = null;
  state.revealSwitched = null;
  for (const other of ui.transcript.querySelectorAll(":scope > .message.found")) other.classList.remove("found");
  node.classList.add("found");
  node.scrollIntoView({ block: "center" });
}

/** The turn is over (its `turn_end` was applied to the transcript). */
function turnEnded(event) {
  const outcome = event.outcome;
  if (outcome === "error" && ui.error.hidden) showError(event.message || "The model failed to answer.", { retry: true });
  sequencer.finish();
  setStreaming(false);
  if (outcome === "awaiting_approval") announce("A tool call waits for your approval.");
  else announce(outcome === "complete" || outcome === "cap_partial" ? "Answer complete." : event.message || "");
}

function announce(text) {
  ui.status.textContent = text || "";
}

// ---------------------------------------------------------------------------------------
// Conversation list and header

function upsertConversation(conversation) {
  if (!conversation || !conversation.id) return;
  if (conversations.upsert(conversation) && state.awaitingNew) state.adoptable.add(conversation.id);
  adoptNewConversation(conversation.id);
  if (conversation.id === state.currentId) {
    renderHeader();
    if (conversation.status !== "streaming") ui.saving.hidden = true;
    if (conversation.status === "streaming") setStreaming(true);
    else if (state.streaming && !state.turnPending && !transcript.live.size && !sequencer.turnId) setStreaming(false);
    showStop(); // a pause for approval is known from the status, which may come after the turn's end
    // "A turn is already running" is over once that turn is: the send can be tried again.
    if (conversation.status !== "streaming" && state.conflictShown) hideError();
    if (conversation.status === "error" && conversation.lastError && ui.error.hidden) {
      showError(conversation.lastError.message || "The last answer failed.", { retry: true });
    }
  }
}

function removeConversation(conversationId) {
  conversations.remove(conversationId);
  if (conversationId === state.currentId) {
    startNewChat();
    announce("Conversation deleted.");
  }
}

function renderHeader() {
  const current = state.currentId ? conversations.get(state.currentId) : null;
  header.render(current);
  // A temporary chat is never shared (docs/data.md "Temporary chats"); the server refuses it too.
  ui.share.open.hidden = !state.currentId || Boolean(current && current.temporary);
  ui.temporaryToggle.hidden = Boolean(state.currentId); // a new chat only (docs/data.md "Temporary chats")
}

// ---------------------------------------------------------------------------------------
// Actions

function setStreaming(on) {
  state.streaming = on;
  if (!on) {
    state.stopping = false;
    state.turnPending = false;
  }
  showStop();
  ui.send.hidden = on;
  ui.app.classList.toggle("is-streaming", on);
}

/** A turn Stop can end: one streaming, or one paused for a tool call's approval (docs/approval.md "The page"). */
function turnOpen() {
  return state.streaming || currentStatus() === "awaiting_approval";
}

function showStop() {
  ui.stop.hidden = !turnOpen();
  ui.stop.disabled = state.stopping;
  ui.stop.textContent = state.stopping ? "Stopping…" : "Stop";
}

function sendMessage() {
  const text = ui.composer.value;
  if (!text.trim() || state.streaming) return;
  if (tray.busy()) {
    showError("A file is still uploading; send when its bar is full.", { retry: false });
    return;
  }
  if (initial.maxMessageChars && text.length > initial.maxMessageChars) {
    showError(`Your message is longer than ${initial.maxMessageChars} characters.`, { retry: false });
    return;
  }
  const frame = { type: "send", conversationId: state.currentId, text, model: header.model, attachments: tray.ids() };
  if (!state.currentId && ui.temporary.checked) frame.temporary = true;
  if (!connection.send(frame)) {
    holdSend();
    return;
  }
  hideError();
  state.awaitingNew = state.currentId === null;
  state.turnPending = true;
  ui.composer.value = "";
  state.sentFiles = tray.take();
  transcript.addPending(text);
  setStreaming(true);
}

/**
 * A send pressed before the socket is open (the page has just loaded, or it is reconnecting):
 * the composer keeps the text and it goes when the socket opens (onOpen), as it then reads;
 * after HOLD_SEND_MS with no connection the page says so and the text stays in the composer
 * (docs/websocket.md "Connecting").
 */
function holdSend() {
  if (state.heldSend) return;
  showError("Connecting… your message goes as soon as the connection is up.", { retry: false });
  state.heldSend = setTimeout(() => {
    state.heldSend = null;
    showError("Not connected to the server. Your message is kept; try again in a moment.", { retry: false });
  }, HOLD_SEND_MS);
}

function stopTurn() {
  if (!turnOpen() || !state.currentId) return;
  state.stopping = true;
  setStreaming(true);
  connection.send({ type: "cancel", conversationId: state.currentId });
}

/** Approve or deny a waiting tool call (docs/websocket.md `approve` / `deny`). */
function decide(callId, approved, reason) {
  const frame = { type: approved ? "approve" : "deny", conversationId: state.currentId, callId };
  if (reason) frame.reason = reason;
  if (!connection.send(frame)) {
    showError("Not connected to the server; answer again in a moment.", { retry: false });
    const card = transcript.findCard(callId);
    if (card) reopenCardApproval(card);
  }
}

function retryTurn() {
  if (!state.currentId || state.streaming) return;
  if (!connection.send({ type: "retry", conversationId: state.currentId })) {
    showError("Not connected to the server; try again in a moment.", { retry: true });
    return;
  }
  hideError();
  transcript.dropLastExchange();
  state.turnPending = true;
  setStreaming(true);
}

/**
 * Edit, regenerate or switch branch (docs/websocket.md "Branches"). The server answers every
 * tab with a snapshot of the new path; `startsTurn`: a turn follows it.
 */
function branchRequest(frame, startsTurn) {
  if (!state.currentId || state.streaming) return;
  if (!connection.send({ ...frame, conversationId: state.currentId })) {
    showError("Not connected to the server; try again in a moment.", { retry: false });
    return;
  }
  hideError();
  if (startsTurn) {
    state.turnPending = true;
    setStreaming(true);
  }
}

const BRANCH_REQUESTS = new Set(["edit", "regenerate", "switch_branch"]);

function handleErrorFrame(frame) {
  const problem = frame.problem || {};
  const text = problem.detail || frame.message || problem.title || "The server refused that.";
  if (frame.request === "instructions") {
    settings.failed(text);  // shown in the dialog, where the text still is
    return;
  }
  if (frame.request === "send") {
    // Nothing is lost: the refused text goes back into the composer.
    const text = transcript.takeBackPending();
    if (text !== null && !ui.composer.value) ui.composer.value = text;
    tray.putBack(state.sentFiles);
    state.sentFiles = [];
    state.awaitingNew = false;
    state.turnPending = false;
    // A turn another tab started may be running here: keep showing it (and its Stop).
    setStreaming(Boolean(sequencer.turnId) || currentStatus() === "streaming");
    if (isConflict(frame)) state.conflictShown = true;
  } else if (BRANCH_REQUESTS.has(frame.request)) {
    // Nothing changed here or on the server: an open editor keeps its text.
    state.turnPending = false;
    if (frame.request === "switch_branch") state.reveal = state.revealSwitched = null;
    setStreaming(Boolean(sequencer.turnId) || currentStatus() === "streaming");
  } else if (frame.request === "retry") {
    state.turnPending = false;
    setStreaming(false);
    if (state.currentId) connection.send({ type: "subscribe", conversationId: state.currentId });
  } else if ((frame.request === "approve" || frame.request === "deny") && state.currentId) {
    connection.send({ type: "subscribe", conversationId: state.currentId }); // e.g. decided in another tab
  } else if (frame.request === "subscribe" && frame.conversationId === state.currentId) {
    startNewChat();
  } else if (frame.request === "list") {
    conversations.pageFailed();
  }
  showError(text, { retry: false });
}

function isConflict(frame) {
  const problem = frame.problem || {};
  return frame.code === "conflict" || String(problem.type || "").endsWith("/conflict");
}

function currentStatus() {
  const conversation = state.currentId ? conversations.get(state.currentId) : null;
  return conversation ? conversation.status : null;
}

function showError(text, { retry }) {
  ui.errorText.textContent = text;
  ui.retry.hidden = !retry;
  ui.error.hidden = false;
}

function hideError() {
  ui.error.hidden = true;
  state.conflictShown = false;
}

function startNewChat() {
  state.currentId = null;
  state.awaitingNew = false;
  sequencer.reset(null, 0);
  transcript.clear();
  hideError();
  setStreaming(false);
  if (window.location.pathname !== "/") history.pushState({ conversationId: null }, "", "/");
  conversations.render();
  renderHeader();
  ui.composer.focus();
}

function openConversation(conversationId, { push }) {
  if (conversationId === state.currentId) return;
  state.currentId = conversationId;
  state.awaitingNew = false;
  sequencer.reset(null, 0);
  transcript.clear();
  hideError();
  setStreaming(false);
  if (push) history.pushState({ conversationId }, "", `/c/${conversationId}`);
  conversations.render();
  renderHeader();
  connection.send({ type: "subscribe", conversationId });
}

/** Narrow screens: fold the conversation list away again. */
function closeSidebar() {
  ui.app.classList.remove("sidebar-open");
  ui.toggle.setAttribute("aria-expanded", "false");
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
// The composer's maxlength cuts a long paste silently: say so.
ui.composer.addEventListener("paste", (event) => {
  const limit = initial.maxMessageChars;
  const pasted = event.clipboardData ? event.clipboardData.getData("text") : "";
  const room = limit - (ui.composer.value.length - (ui.composer.selectionEnd - ui.composer.selectionStart));
  if (limit && pasted.length > room) {
    showError(`Messages are limited to ${limit} characters: only the first ${Math.max(0, room)} of the ` +
              `${pasted.length} pasted were kept.`, { retry: false });
  }
});
ui.composer.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    sendMessage();
  } else if (event.key === "Escape" && turnOpen()) {
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
  if (open) ui.newChat.focus();
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && ui.app.classList.contains("sidebar-open")) {
    closeSidebar();
    ui.toggle.focus();
  }
});
ui.transcript.closest(".main").addEventListener("click", (event) => {
  if (ui.app.classList.contains("sidebar-open") && !ui.toggle.contains(event.target)) closeSidebar();
});
window.addEventListener("popstate", () => {
  const match = /^\/c\/([0-9a-f-]{36})$/i.exec(window.location.pathname);
  if (match) openConversation(match[1], { push: false });
  else if (state.currentId) startNewChat();
});
conversations.seed([...(initial.conversations || []), initial.conversation]);
renderHeader();
transcript.updateEmptyState();
setStreaming(false);
connection.connect();
ui.composer.focus();
// An Enter pressed before this module ran (early.js): send it now (held until the socket opens).
if (window.jxaiEarly) {
  window.jxaiEarly.listening = false;
  if (window.jxaiEarly.enter) sendMessage();
}
