// Our only script (no inline script anywhere: the CSP forbids it), loaded on every page.
//
// Copy buttons: a button.copy carries what it copies (data-copy) or names the box around
// it whose <pre> it copies (data-copy-in). The buttons are hidden until this script shows
// them: without JavaScript there is nothing to click.
//
// Keyboard: "/" focuses the search box; "j"/"k" move between rows or cards marked data-nav
// (runs, sessions, iterations); Enter on a focused row opens its first link.
//
// Search as you type (the sessions list's form#filters, driven by htmx): the first request
// of a search pushes one history entry, the following keystrokes replace it, so Back
// leaves the search in one step; a request that would push the address already shown
// replaces it instead. Once a link is followed, a search still waiting for its typing
// pause is not sent and one in flight is not swapped in, so a late search result never
// takes the address bar back from the page being opened.
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

  function isSearch(config) {
    return !!(config && config.elt && config.elt.id === "filters");
  }
  document.addEventListener("htmx:configRequest", function (event) {
    // The address of a search names only what is set: ?q=word&sort=recent, not every
    // empty field of the form (a GET form without JavaScript still sends them all).
    if (!isSearch(event.detail)) return;
    var data = event.detail.formData;
    Array.from(new Set(data.keys())).forEach(function (name) {
      if (data.getAll(name).every(function (value) { return value === ""; })) data.delete(name);
    });
  });
  var leaving = false;     // a boosted navigation (a link, a form) is under way
  var navigations = 0;     // boosted navigations started so far
  var searchEntry = false; // the current history entry was pushed by typing in the search
  document.addEventListener("htmx:beforeRequest", function (event) {
    var detail = event.detail;
    if (isSearch(detail.requestConfig)) {
      if (leaving) event.preventDefault();
      else detail.xhr.navigationsAtStart = navigations;
    } else if (detail.boosted) {
      leaving = true;
      navigations += 1;
    }
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    // A search answered after a link was followed is dropped: neither swapped in nor
    // written to the address bar (htmx updates the history only when it swaps).
    var detail = event.detail;
    if (isSearch(detail.requestConfig) && detail.xhr.navigationsAtStart !== navigations) {
      detail.shouldSwap = false;
    }
  });
  // A refused request (4xx) shows its message where the person acted, as it does without
  // JavaScript: htmx swaps only 2xx answers by default. A boosted link or form answered
  // with a whole page (a 400 naming the bad field, the form again with its errors): that
  // page is swapped in. A fragment request (show more, the live list, the search): the
  // answer's alert, or its status, is shown right after what sent it.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    var status = detail.xhr.status;
    if (status < 400 || status >= 500 || status === 401) return;
    if (detail.boosted) {
      detail.shouldSwap = true;
      detail.isError = false;
      return;
    }
    var source = detail.requestConfig && detail.requestConfig.elt;
    if (!source || !source.parentNode) return;
    var answer = new DOMParser().parseFromString(detail.xhr.responseText || "", "text/html");
    var said = answer.querySelector("[role=alert]");
    var text = said && said.textContent.trim() ? said.textContent.trim() : "The server refused this request (" + status + ").";
    var shown = source.nextElementSibling;
    if (!shown || !shown.hasAttribute("data-refused")) {
      shown = document.createElement("p");
      shown.className = "error";
      shown.setAttribute("role", "alert");
      shown.setAttribute("data-refused", "");
      source.parentNode.insertBefore(shown, source.nextSibling);
    }
    shown.textContent = text;
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.boosted) leaving = false;
  });
  document.addEventListener("htmx:afterSettle", function () { leaving = false; });
  document.addEventListener("htmx:beforeHistoryUpdate", function (event) {
    var config = event.detail.requestConfig;
    var history = event.detail.history;
    if (!isSearch(config)) { searchEntry = false; return; }
    var typed = !!(config.triggeringEvent && config.triggeringEvent.type === "input");
    if (history.path === location.pathname + location.search || (typed && searchEntry)) {
      history.type = "replace";
    }
    searchEntry = typed;
  });

  function showCopyButtons(root) {
    Array.prototype.forEach.call((root || document).querySelectorAll("button.copy[hidden]"), function (button) {
      button.hidden = false;
    });
  }
  function copied(button, ok) {
    var label = button.getAttribute("data-caption") || button.textContent;
    button.setAttribute("data-caption", label);
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(function () { button.textContent = label; }, 1500);
  }
  function copyText(text, button) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { copied(button, true); }, function () { fallback(text, button); });
    } else {
      fallback(text, button);
    }
  }
  function fallback(text, button) {
    // Plain http on another host is no "secure context": the clipboard API is missing there.
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (error) { ok = false; }
    document.body.removeChild(area);
    copied(button, ok);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.copy") : null;
    if (!button) return;
    var text = button.getAttribute("data-copy");
    if (text === null) {
      var box = button.closest(button.getAttribute("data-copy-in"));
      var source = box ? box.querySelector("pre") : null;
      text = source ? source.textContent : "";
    }
    copyText(text, button);
  });
  document.addEventListener("DOMContentLoaded", function () { showCopyButtons(document); });
  document.addEventListener("htmx:load", function (event) { showCopyButtons(event.target); });
})();
