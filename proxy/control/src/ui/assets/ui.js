// airlock review UI: keyboard navigation and confirmations. Everything works without it.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  var rows = function () { return Array.prototype.slice.call(document.querySelectorAll("tr.row")); };
  var current = -1;
  function focusRow(index) {
    var all = rows();
    if (!all.length) { return; }
    current = Math.max(0, Math.min(all.length - 1, index));
    all.forEach(function (row, i) { row.classList.toggle("focus", i === current); });
    all[current].scrollIntoView({ block: "nearest" });
  }
  function press(selector) {
    var row = rows()[current];
    var button = row && row.querySelector(selector);
    if (button) { button.click(); }
  }
  document.addEventListener("keydown", function (event) {
    var tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || event.ctrlKey || event.metaKey || event.altKey) { return; }
    switch (event.key) {
      case "j": focusRow(current + 1); break;
      case "k": focusRow(current - 1); break;
      case "Enter":
        var row = rows()[current];
        if (row && row.getAttribute("data-href") && tag !== "button" && tag !== "a") { window.location = row.getAttribute("data-href"); }
        break;
      case "a": press("button.approve"); break;
      case "x": press("button.reject"); break;
      case "?":
        var help = document.querySelector(".help");
        if (help) { help.remove(); break; }
        help = document.createElement("div");
        help.className = "help";
        help.textContent = "j/k: next/previous row · Enter: open · a: approve · x: reject · Alt+Shift+C: commit · ?: close";
        document.body.appendChild(help);
        break;
      default: return;
    }
  });
  document.addEventListener("click", function (event) {
    var row = event.target.closest && event.target.closest("tr.row");
    if (row) { current = rows().indexOf(row); rows().forEach(function (r, i) { r.classList.toggle("focus", i === current); }); }
  });
})();
