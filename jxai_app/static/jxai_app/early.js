// jxai chat page: the one script that runs before the page's modules (a plain, blocking script
// in <head>). chat.js starts only after the vendored libraries have loaded; until then an Enter
// in the composer would put a newline in the message and send nothing. This remembers such an
// Enter (and keeps the newline out); chat.js takes over at start and sends what the composer
// holds (docs/websocket.md "Connecting").
window.jxaiEarly = { listening: true, enter: false };
document.addEventListener("keydown", (event) => {
  const early = window.jxaiEarly;
  if (!early.listening || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
  if (event.target && event.target.id === "composer") {
    event.preventDefault();
    early.enter = true;
  }
}, true);
