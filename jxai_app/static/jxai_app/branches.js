// jxai chat page: branches (docs/websocket.md "Branches"). A conversation is a tree;
// the page shows its active path. Each saved message carries `branch` {index, count, prev,
// next}: where it sits among its siblings. This module draws, on a message element:
//   - `‹ 2 / 3 ›` when it has siblings (the buttons ask the server to switch branch);
//   - Edit on a user message (an editor in place; sending it makes a new branch);
//   - Regenerate on the first message of an answer;
//   - "Stopped — no answer was saved" under a question whose turn was stopped.
// The buttons only send frames; the view changes when the server's snapshot arrives.

import { el } from "./render.js";

export const STOPPED_MARKER = "Stopped — no answer was saved";

const NO_BRANCH = Object.freeze({ index: 0, count: 1, prev: null, next: null });

function button(label, testid, onClick, ariaLabel) {
  const node = el("button", "button branch-action", label, testid);
  node.type = "button";
  if (ariaLabel) node.setAttribute("aria-label", ariaLabel);
  node.addEventListener("click", onClick);
  return node;
}

/**
 * Draw (or redraw) a message element's branch controls from its saved `message`.
 * @param {Element} node the message element
 * @param {object} message the saved message (role, branch, stopped)
 * @param {{answer: boolean, onSwitch: function(number), onEdit: function(Element),
 *          onRegenerate: function(number)}} actions `answer`: the element starts an answer
 */
export function setBranchControls(node, message, actions) {
  // The controls live in their own span of the message's action bar (actions.js: Copy,
  // feedback), so redrawing them leaves the other actions alone.
  let bar = node.querySelector(":scope > .message-actions");
  if (!bar) {
    bar = el("div", "message-actions");
    node.append(bar);
  }
  let controls = bar.querySelector(":scope > .branch-controls");
  if (!controls) {
    controls = el("span", "branch-controls");
    bar.prepend(controls);
  }
  controls.replaceChildren();
  const branch = message.branch || NO_BRANCH;
  if (branch.count > 1) {
    const prev = button("‹", "branch-prev", () => actions.onSwitch(branch.prev), "Previous version");
    const next = button("›", "branch-next", () => actions.onSwitch(branch.next), "Next version");
    prev.disabled = branch.prev == null;
    next.disabled = branch.next == null;
    controls.append(prev, el("span", "branch-position", `${branch.index + 1} / ${branch.count}`, "branch-position"),
      next);
  }
  if (message.role === "user") {
    controls.append(button("Edit", "edit", () => actions.onEdit(node)));
  } else if (actions.answer) {
    controls.append(button("Regenerate", "regenerate", () => actions.onRegenerate(message.id),
      "Regenerate this answer with the selected model"));
  }
  controls.hidden = !controls.children.length;
  let marker = node.querySelector(":scope > .stopped-marker");
  if (message.role === "user" && message.stopped) {
    if (!marker) {
      marker = el("p", "stopped-marker", STOPPED_MARKER, "stopped-marker");
      node.insertBefore(marker, bar);
    }
  } else if (marker) {
    marker.remove();
  }
}

/**
 * Edit a user message in place: a text box with its text, Send and Cancel. `submit(text)`
 * sends the edit; the editor stays until the server's snapshot of the new branch replaces
 * the view, so a refused edit (an error banner) keeps the text.
 * @param {Element} node a user message element
 * @param {function(string)} submit
 */
export function openEditor(node, submit) {
  if (node.querySelector(":scope > .edit-form")) return;
  const body = node.querySelector(":scope > .message-body");
  const bar = node.querySelector(":scope > .message-actions");
  const form = el("form", "edit-form");
  const input = el("textarea", "edit-input", null, "edit-input");
  input.value = body.textContent;
  input.rows = Math.min(10, Math.max(2, input.value.split("\n").length));
  input.setAttribute("aria-label", "Edit your message");
  const send = el("button", "button primary", "Send", "edit-submit");
  send.type = "submit";
  const cancel = button("Cancel", "edit-cancel", () => close());
  const row = el("div", "edit-actions");
  row.append(cancel, send);
  form.append(input, row);
  const close = () => {
    form.remove();
    body.hidden = false;
    if (bar) bar.hidden = false;
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value.trim()) submit(input.value);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      close();
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  body.hidden = true;
  if (bar) bar.hidden = true;
  body.after(form);
  input.focus();
}
