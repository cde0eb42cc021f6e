// Knowledge base: drag-and-drop multi-file upload with a progress bar per file, new rows
// added at once, and live status badges (polled JSON) without reloading. Document names
// and errors are put in as text (Groundwork.el from app.js, or textContent): they are user data.
(function () {
  "use strict";
  var el = Groundwork.el;
  var form = document.getElementById("upload-form");
  var input = document.getElementById("file-input");
  var list = document.getElementById("upload-progress");
  var table = document.getElementById("documents-table");
  var wrap = document.getElementById("documents-wrap");
  var announcer = document.getElementById("status-announcer");
  // No upload form for a role that may not upload (a viewer); the header's forms carry the token.
  var csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  var labels = { pending: "Pending", processing: "Processing", ready: "Ready", failed: "Failed", deleting: "Deleting" };
  var known = {};  // document id -> last status seen, to announce changes once
  var uploadNotes = {};  // document id -> its line in the upload list, kept in step with the status
  var pollTimer = null;

  function count(n) { return Number(n || 0).toLocaleString("en-US"); }

  function size(bytes) {
    if (bytes < 1024) return bytes + " bytes";
    var units = ["KB", "MB", "GB"], value = bytes / 1024, i = 0;
    while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
    return value.toFixed(1) + " " + units[i];
  }

  // ---------- Upload -------------------------------------------------------------------

  function progressRow(file) {
    var bar = el("progress", { max: 100, value: 0, "aria-label": "Uploading " + file.name });
    var note = el("span", { class: "upload-note" }, "Uploading " + size(file.size) + "…");
    var li = list.appendChild(el("li", null,
      el("span", { class: "nowrap ellipsis" }, file.name), bar, note));
    return { bar: bar, note: note, li: li };
  }

  function upload(file) {
    var ui = progressRow(file);
    var data = new FormData();
    data.append("file", file);
    if (form.elements.collection) data.append("collection", form.elements.collection.value);  // the chosen collection
    if (form.elements.tags && form.elements.tags.value.trim()) data.append("tags", form.elements.tags.value);  // "a, b"
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = function (e) { if (e.lengthComputable) ui.bar.value = Math.round(100 * e.loaded / e.total); };
    xhr.onload = function () {
      var body = {};
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
      if ((xhr.status === 202 || xhr.status === 200) && body.document) {
        ui.bar.value = 100;
        ui.note.textContent = xhr.status === 200 ? "Already in the knowledge base." : "Uploaded. Processing starts in a moment.";
        ui.li.className = "ok";
        uploadNotes[body.document.id] = ui.note;
        body.document.may_delete = table.dataset.mayDelete !== "no";  // the uploader's own document
        addOrUpdate(body.document, true);
        poll(800);
      } else {
        ui.bar.value = 0;
        ui.note.textContent = (body.error && body.error.message) || ("Upload failed (HTTP " + xhr.status + "). Try again.");
        ui.li.className = "failed";
      }
    };
    xhr.onerror = function () { ui.note.textContent = "Network error: check your connection and try again."; ui.li.className = "failed"; };
    xhr.send(data);
  }

  function send(files) { Array.prototype.forEach.call(files, upload); input.value = ""; }

  if (form) {
    form.addEventListener("submit", function (e) { e.preventDefault(); if (input.files.length) send(input.files); else input.click(); });
    input.addEventListener("change", function () { if (input.files.length) send(input.files); });
    ["dragenter", "dragover"].forEach(function (type) {
      form.addEventListener(type, function (e) { e.preventDefault(); form.classList.add("dragging"); });
    });
    ["dragleave", "drop"].forEach(function (type) {
      form.addEventListener(type, function (e) { e.preventDefault(); form.classList.remove("dragging"); });
    });
    form.addEventListener("drop", function (e) { if (e.dataTransfer && e.dataTransfer.files.length) send(e.dataTransfer.files); });
  }

  // ---------- Rows -----------------------------------------------------------------------

  function actionForm(action, label, className, confirmText, back) {
    return el("form", { class: "inline", method: "post", action: action, "data-confirm": confirmText },
      el("input", { type: "hidden", name: "csrfmiddlewaretoken", value: csrf }),
      back ? el("input", { type: "hidden", name: "next", value: back }) : "",
      el("button", { class: className, type: "submit", "aria-label": label }, label.split(" ")[0]));
  }

  function newRow(d) {
    return el("tr", { "data-document-id": d.id },
      el("td", { class: "doc-name-cell" }, el("a", { class: "doc-name", href: "/documents/" + encodeURIComponent(d.id) + "/", title: d.name },
        Groundwork.nameWithBreaks(d.name)),
        (d.tags && d.tags.length) ? el("ul", { class: "tag-list", "aria-label": "Tags" }, d.tags.map(function (t) {
          return el("li", null, el("span", { class: "tag" }, t));
        })) : ""),
      el("td", { "data-label": "Status", "data-field": "status-cell" }, el("span", { class: "badge", "data-field": "status" })),
      el("td", { class: "num", "data-label": "Chunks", "data-field": "chunk_count" }),
      el("td", { class: "num", "data-label": "Size" }, size(d.size)),
      el("td", { class: "num", "data-label": "Charged" }, el("span", { title: table.dataset.chargeNote || null },
        el("span", { "data-field": "embedding_tokens" }), " ", el("span", { "data-field": "token_word" }, "tokens"), " · ",
        el("span", { "data-field": "credits_charged" }), " ", el("span", { "data-field": "credit_word" }, "credits"))),
      el("td", { class: "nowrap", "data-label": "Added" }, el("time", { datetime: d.created_at }, "just now")),
      // The same buttons as the server's rows: what the role may do (data-may-* on the table).
      el("td", { class: "nowrap row-actions" },
        table.dataset.mayReindex ? actionForm("/documents/" + d.id + "/reindex/", "Reindex " + d.name, "btn-small", undefined,
                                              table.dataset.return) : "", " ",
        (d.may_delete || table.dataset.mayDelete === "yes") ?
          actionForm("/documents/" + d.id + "/delete/", "Delete " + d.name, "btn-small danger",
                     "Delete " + d.name + "? Its passages leave search at once.") : ""));
  }

  function update(tr, d) {
    var badge = tr.querySelector('[data-field="status"]');
    var processing = d.status === "processing" && d.progress && d.progress.chunks_total;
    var words = Groundwork.progressText(d.status, d.progress);
    badge.textContent = (labels[d.status] || d.status) + (words ? " · " + words : "");
    badge.className = "badge badge-" + d.status;
    var cell = badge.parentNode;
    var bar = cell.querySelector("progress");
    if (processing) {
      if (!bar) {
        bar = el("progress", { class: "progress-inline", "aria-label": "Embedding progress of " + d.name });
        badge.after(bar);
      }
      bar.max = d.progress.chunks_total; bar.value = d.progress.chunks_embedded;
    } else if (bar) {
      bar.remove();
    }
    var err = cell.querySelector('[data-field="error"]');
    if (d.status === "failed") {
      if (!err) err = cell.appendChild(el("div", { class: "error-text", "data-field": "error" }));
      err.textContent = d.error || "Processing failed.";
    } else if (err) {
      err.remove();
    }
    // Waiting for a busy or unreachable model server: what it waits for, and until when.
    var wait = cell.querySelector('[data-field="wait"]');
    if (d.status === "pending" && d.message) {
      if (!wait) wait = cell.appendChild(el("div", { class: "muted small", "data-field": "wait" }));
      wait.textContent = d.message;
    } else if (wait) {
      wait.remove();
    }
    tr.querySelector('[data-field="chunk_count"]').textContent = d.chunk_count;
    tr.querySelector('[data-field="embedding_tokens"]').textContent = count(d.embedding_tokens);
    tr.querySelector('[data-field="credits_charged"]').textContent = count(d.credits_charged);
    tr.querySelector('[data-field="token_word"]').textContent = d.embedding_tokens === 1 ? "token" : "tokens";
    tr.querySelector('[data-field="credit_word"]').textContent = d.credits_charged === 1 ? "credit" : "credits";
    var note = uploadNotes[d.id];
    if (note && d.status === "pending" && d.progress && d.progress.queue_position > 1) {
      note.textContent = "Uploaded. Waiting to be indexed: " + Groundwork.progressText(d.status, d.progress) + ".";
    } else if (note && d.status !== "pending") {
      note.textContent = d.status === "ready"
        ? "Ready: " + Groundwork.plural(d.chunk_count, "chunk") + ", " + Groundwork.plural(d.embedding_tokens, "token") + " embedded, "
          + Groundwork.plural(d.credits_charged, "credit") + "."
        : d.status === "failed" ? "Failed: " + (d.error || "processing failed.")
        : "Processing" + (d.progress && d.progress.chunks_total ? " · " + Groundwork.progressText(d.status, d.progress) : "…")
          + (d.credits_estimate ? " (about " + Groundwork.plural(d.credits_estimate, "credit") + ")" : "");
      note.parentNode.className = d.status === "failed" ? "failed" : "ok";
    }
    var before = known[d.id];
    if (before && before !== d.status && (d.status === "ready" || d.status === "failed")) {
      announcer.textContent = d.name + " is " + (d.status === "ready" ? "ready" : "failed: " + (d.error || ""));
    }
    known[d.id] = d.status;
  }

  function addOrUpdate(d, prepend) {
    var tr = table.querySelector('tr[data-document-id="' + d.id + '"]');
    if (!tr) {
      if (table.dataset.filtered) return;  // a filtered list shows only what matched on load
      tr = newRow(d);
      var body = table.tBodies[0];
      if (prepend) body.prepend(tr); else body.appendChild(tr);
      wrap.hidden = false;
      var empty = document.getElementById("documents-empty");
      if (empty) empty.remove();
    }
    update(tr, d);
  }

  // ---------- Live status ----------------------------------------------------------------

  function poll(delay) {
    clearTimeout(pollTimer);
    pollTimer = setTimeout(refresh, delay);
  }

  function refresh() {
    fetch(table.dataset.statusUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { poll(6000); return; }
        // Embedding a document costs credits: keep the header's balance in step.
        var balance = document.querySelector("#header-balance [data-balance]");
        if (balance && typeof data.credits_remaining === "number") balance.textContent = data.credits_remaining.toLocaleString("en-US");
        var busy = false, seen = {};
        // Oldest first, each prepended: the table stays newest first.
        data.documents.slice().reverse().forEach(function (d) {
          seen[d.id] = true;
          addOrUpdate(d, true);
          if (d.status === "pending" || d.status === "processing") busy = true;
        });
        // Deleted elsewhere (another tab, a teammate): the row goes.
        table.querySelectorAll("tr[data-document-id]").forEach(function (tr) {
          if (!seen[tr.dataset.documentId] && !table.dataset.filtered) tr.remove();
        });
        poll(busy ? 1000 : 6000);
      })
      .catch(function () { poll(6000); });
  }

  table.querySelectorAll("tr[data-document-id]").forEach(function (tr) {
    var badge = tr.querySelector('[data-field="status"]');
    known[tr.dataset.documentId] = badge.className.replace(/.*badge-/, "");
  });
  poll(1000);
})();
