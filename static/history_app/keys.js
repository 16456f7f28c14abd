// Keyboard navigation, the only script of our own (no inline script anywhere: the CSP
// forbids it). "/" focuses the search box; "j"/"k" move between rows or cards marked
// data-nav (runs, sessions, iterations); Enter on a focused row opens its first link.
(function () {
  "use strict";
  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }
  function items() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-nav]"));
  }
  function move(step) {
    var list = items();
    if (!list.length) return;
    var current = list.indexOf(document.activeElement.closest ? document.activeElement.closest("[data-nav]") : null);
    var next = list[Math.max(0, Math.min(list.length - 1, current + step))];
    if (current === -1) next = list[step > 0 ? 0 : list.length - 1];
    if (!next.hasAttribute("tabindex")) next.setAttribute("tabindex", "-1");
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (event.key === "/") {
      var box = document.getElementById("q");
      if (box) { event.preventDefault(); box.focus(); box.select(); }
    } else if (event.key === "j") {
      move(1);
    } else if (event.key === "k") {
      move(-1);
    } else if (event.key === "Enter" && document.activeElement && document.activeElement.hasAttribute("data-nav")) {
      var link = document.activeElement.querySelector("a[href]");
      if (link) link.click();
    }
  });
})();
