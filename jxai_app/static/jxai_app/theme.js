// jxai pages: the colour scheme (docs/architecture.md "The chat page"). By default the page
// follows the system's light or dark setting; the Theme picker (on the chat page) can fix it
// to light or dark for this browser. The choice is kept in localStorage under `jxai-theme`
// and applied as `<html data-theme="light|dark">` (chat.css switches `color-scheme`), and the
// code highlighting's style sheet for that scheme is the one in force.

const KEY = "jxai-theme";
const CHOICES = new Set(["system", "light", "dark"]);

function stored() {
  try {
    const value = window.localStorage.getItem(KEY);
    return CHOICES.has(value) ? value : "system";
  } catch {
    return "system"; // storage refused (private mode): follow the system
  }
}

/** Apply `choice` ("system" | "light" | "dark") to the page. */
function apply(choice) {
  const root = document.documentElement;
  if (choice === "system") delete root.dataset.theme;
  else root.dataset.theme = choice;
  for (const link of document.querySelectorAll("link[data-scheme]")) {
    const scheme = link.dataset.scheme;
    link.media = choice === "system" ? `(prefers-color-scheme: ${scheme})` : choice === scheme ? "all" : "not all";
  }
}

apply(stored());
const picker = document.getElementById("theme");
if (picker) {
  picker.value = stored();
  picker.addEventListener("change", () => {
    const choice = CHOICES.has(picker.value) ? picker.value : "system";
    try {
      if (choice === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, choice);
    } catch {
      /* not kept: applies to this page only */
    }
    apply(choice);
  });
}
