// Shared by every page (base.html loads it before each page's own script): the Groundwork
// namespace with the one DOM helper the page scripts build with, and behaviour every page
// gets: confirmation before destructive forms, copy buttons. Pages work without the
// behaviour; it only adds safety nets and conveniences.
(function () {
  "use strict";
  var Groundwork = window.Groundwork = window.Groundwork || {};

  // el("a", {class: "citation", href: url, "data-n": 3}, "Document ", 3): a new element with
  // these attributes and children. Safe with user, model and document text: children that are
  // not nodes go in as text nodes and attributes are set with setAttribute, so text never
  // becomes markup. An attribute that is null, undefined or false is left out (true gives an
  // empty one); children that are null, undefined, false or "" are skipped; arrays are flattened.
  Groundwork.el = function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      var value = attrs[name];
      if (value != null && value !== false) node.setAttribute(name, value === true ? "" : String(value));
    });
    append(node, Array.prototype.slice.call(arguments, 2));
    return node;
  };

  // A document's name with a line-break opportunity (<wbr>) after each separator (- _ . / \),
  // as documents/templatetags/document_names.py writes it: it wraps between parts, not inside.
  Groundwork.nameWithBreaks = function nameWithBreaks(name) {
    return String(name).split(/([-_.\/\\])/).filter(Boolean).map(function (part) {
      return /^[-_.\/\\]$/.test(part) ? [part, document.createElement("wbr")] : part;
    });
  };

  // "1 chunk", "2 chunks", "1,559 tokens": a count with its noun, English plural (+s).
  Groundwork.plural = function plural(n, noun) {
    var value = Number(n || 0);
    return value.toLocaleString("en-US") + " " + noun + (value === 1 ? "" : "s");
  };

  // The words after a document's status while it is indexed, as documents/progress.py's
  // progress_text writes them: "412/1,250 chunks · about 3 min left", "2nd in line".
  function ordinal(n) {
    var suffix = n % 100 >= 10 && n % 100 <= 20 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" })[n % 10] || "th";
    return n.toLocaleString("en-US") + suffix;
  }
  function duration(seconds) {
    if (seconds < 60) return "about " + Math.max(seconds, 1) + " s";
    var minutes = Math.ceil(seconds / 60);
    if (minutes < 60) return "about " + minutes + " min";
    var hours = Math.floor(minutes / 60), rest = minutes % 60;
    return "about " + hours + " h" + (rest ? " " + rest + " min" : "");
  }
  Groundwork.progressText = function progressText(status, p) {
    if (!p) return "";
    if (status === "pending") return p.queue_position ? ordinal(p.queue_position) + " in line" : "";
    if (!p.chunks_total) return "reading the file";
    var words = p.chunks_embedded.toLocaleString("en-US") + "/" + p.chunks_total.toLocaleString("en-US") + " chunks";
    return p.eta_seconds === null || p.eta_seconds === undefined ? words : words + " · " + duration(p.eta_seconds) + " left";
  };

  function append(node, children) {
    children.forEach(function (child) {
      if (child == null || child === false || child === "") return;
      if (Array.isArray(child)) append(node, child);
      else node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copyTarget);
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });
})();
