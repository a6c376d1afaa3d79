// logscope report: copy buttons, filters, and opening a <details> the page links to. No data lives here.
(function () {
  "use strict";

  function openTarget(id) {
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS") { el.open = true; }
  }

  function copyText(text, button) {
    function done() {
      var old = button.textContent;
      button.textContent = "copied";
      setTimeout(function () { button.textContent = old; }, 1200);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else {
      fallbackCopy(text);
      done();
    }
  }

  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing else to try offline */ }
    document.body.removeChild(area);
  }

  document.addEventListener("click", function (ev) {
    var target = ev.target;
    if (!(target instanceof Element)) { return; }
    var copy = target.closest("[data-copy]");
    if (copy) {
      var source = document.getElementById(copy.getAttribute("data-copy"));
      if (source) { copyText(source.textContent, copy); }
      return;
    }
    var link = target.closest("a[href^='#']");
    if (link) { openTarget(link.getAttribute("href").slice(1)); }
    var toggle = target.closest("[data-toggle-all]");
    if (toggle) {
      var open = toggle.getAttribute("data-toggle-all") === "open";
      document.querySelectorAll(toggle.getAttribute("data-scope") + " details").forEach(function (d) { d.open = open; });
    }
  });

  document.querySelectorAll("[data-severity-filter]").forEach(function (box) {
    box.addEventListener("change", function () {
      var hidden = {};
      document.querySelectorAll("[data-severity-filter]").forEach(function (b) {
        if (!b.checked) { hidden[b.getAttribute("data-severity-filter")] = true; }
      });
      document.querySelectorAll(".finding").forEach(function (f) {
        f.hidden = !!hidden[f.getAttribute("data-severity")];
      });
    });
  });

  document.querySelectorAll("[data-filter-rows]").forEach(function (input) {
    input.addEventListener("input", function () {
      var needle = input.value.toLowerCase();
      var scope = document.getElementById(input.getAttribute("data-filter-rows"));
      if (!scope) { return; }
      scope.querySelectorAll("tbody tr").forEach(function (row) {
        row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
      });
    });
  });

  // Printing shows everything: open every <details> for the printout, then restore what the reader had.
  var closedForPrint = [];
  window.addEventListener("beforeprint", function () {
    closedForPrint = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) { return !d.open; });
    closedForPrint.forEach(function (d) { d.open = true; });
  });
  window.addEventListener("afterprint", function () {
    closedForPrint.forEach(function (d) { d.open = false; });
    closedForPrint = [];
  });

  window.addEventListener("hashchange", function () { openTarget(location.hash.slice(1)); });
  openTarget(location.hash.slice(1));
})();
