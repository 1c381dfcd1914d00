// jxai chat page: the websocket connection and the per-turn cursor.
//
// Protocol: docs/websocket.md. Every event of a turn carries a seq (1, 2, 3 … with no
// gaps); the server's session sequences what each socket gets (once, in order, gaps filled),
// so the page keeps only a cursor: seq <= lastSeq is a copy and ignored, and anything but
// lastSeq + 1 means the page lost track, so it asks for a `resync` (the `replay` or a fresh
// `snapshot` brings it back) and applies nothing until then. The connection
// reconnects with backoff and tells the page (onOpen) so it can re-subscribe; a server that
// shuts down (close code 4001) is left at once for another one. A frame larger than the
// server's message size (a long answer's snapshot or message_saved) arrives as consecutive
// `chunk` frames, slices of its JSON text; they are joined before the frame is handled.

const RESYNC_RETRY_MS = 2000;
const UNAUTHENTICATED = 4401;
const GOING_AWAY = 4001;  // the server drains for a deploy (docs/websocket.md)
const TOO_MANY_SOCKETS = 4429;  // this user holds JXAI_MAX_SOCKETS_PER_USER sockets already
const TOO_MANY_RETRY_MS = 30000;

/**
 * A websocket that reconnects. Frames are JSON objects.
 * Callbacks: onOpen(), onFrame(frame), onState("connecting"|"open"|"closed", attempts).
 */
export class Connection {
  constructor(path, { onOpen, onFrame, onState, onGiveUp }) {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    this.url = `${scheme}//${window.location.host}${path}`;
    this.onOpen = onOpen;
    this.onFrame = onFrame;
    this.onState = onState;
    this.onGiveUp = onGiveUp;
    this.socket = null;
    this.failures = 0;
    this.timer = null;
    this.chunks = [];
  }

  connect() {
    clearTimeout(this.timer);
    this.onState("connecting", this.failures);
    const socket = new WebSocket(this.url);
    this.socket = socket;
    this.chunks = [];
    socket.addEventListener("open", () => {
      this.failures = 0;
      this.onState("open", 0);
      this.onOpen();
    });
    socket.addEventListener("message", (message) => {
      const frame = this.parse(message.data);
      if (frame && typeof frame === "object" && typeof frame.type === "string") this.onFrame(frame);
    });
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      this.failures += 1;
      this.onState("closed", this.failures);
      // 4401: the server saw no logged-in user (logged out, session expired).
      if ((event.code === UNAUTHENTICATED || this.failures >= 3) && this.onGiveUp) this.onGiveUp(this.failures);
      // 4001: the server is shutting down after finishing its turns; another one answers now.
      // 4429: too many of the user's tabs are open (the error frame said so): try again slowly.
      const delay = event.code === GOING_AWAY && this.failures === 1 ? 0
        : event.code === TOO_MANY_SOCKETS ? TOO_MANY_RETRY_MS
          : Math.min(10000, 500 * 2 ** Math.min(this.failures - 1, 5));
      this.timer = setTimeout(() => this.connect(), delay);
    });
  }

  /**
   * The frame a message carries; null while a chunked frame is incomplete, or for text that is
   * not ours to guess at. Chunks: {type: "chunk", index (from 0), count, data} (docs/websocket.md).
   */
  parse(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return null;
    }
    if (!frame || frame.type !== "chunk") return frame;
    if (frame.index === 0) this.chunks = [];
    if (frame.index !== this.chunks.length || typeof frame.data !== "string") {
      this.chunks = []; // a piece went missing: the sequencer's resync or the next snapshot repairs
      return null;
    }
    this.chunks.push(frame.data);
    if (this.chunks.length < frame.count) return null;
    const joined = this.chunks.join("");
    this.chunks = [];
    return this.parse(joined);
  }

  get isOpen() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  /** Send a frame; false when the socket is not open (the caller keeps its data). */
  send(frame) {
    if (!this.isOpen) return false;
    this.socket.send(JSON.stringify(frame));
    return true;
  }
}

/**
 * One turn's cursor (the server sequences; docs/websocket.md "Sequencing").
 * `apply(item)` receives items {seq, messageId, event} exactly once, in seq order;
 * `requestResync(turnId, afterSeq)` is called when an item is not the next one (again every
 * 2 s until the next one comes).
 */
export class TurnSequencer {
  constructor({ apply, requestResync }) {
    this.apply = apply;
    this.requestResync = requestResync;
    this.finished = new Set();
    this.reset(null, 0);
  }

  /** Follow turn `turnId`, every seq up to `lastSeq` already applied. */
  reset(turnId, lastSeq) {
    this.turnId = turnId;
    this.lastSeq = lastSeq;
    this.resyncAskedAt = 0;
  }

  /** True when frames of `turnId` should be fed here (not a turn already over). */
  accepts(turnId) {
    return typeof turnId === "string" && !this.finished.has(turnId);
  }

  /** Feed the items of an `events` or `replay` frame. */
  feed(turnId, items) {
    if (!this.accepts(turnId)) return;
    if (turnId !== this.turnId) this.reset(turnId, 0);
    for (const item of items || []) {
      if (!item || !Number.isInteger(item.seq) || item.seq <= this.lastSeq) continue;
      if (item.seq !== this.lastSeq + 1) {
        this.resync();
        return;
      }
      this.lastSeq = item.seq;
      this.resyncAskedAt = 0;
      this.apply(item);
      if (this.turnId === null) return; // the turn ended inside apply
    }
  }

  resync() {
    const now = Date.now();
    if (now - this.resyncAskedAt < RESYNC_RETRY_MS) return;
    this.resyncAskedAt = now;
    this.requestResync(this.turnId, this.lastSeq);
  }

  /** The turn is over: later frames of it (late layer copies) are ignored. */
  finish() {
    if (this.turnId) this.finished.add(this.turnId);
    this.reset(null, 0);
  }
}
