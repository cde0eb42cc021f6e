// Knowledge base: drag-and-drop multi-file upload with a progress bar per file, and live
// status badges (polled) without reloading. No build step, no framework.
(function () {
  "use strict";
  var form = document.getElementById("upload-form");
  var input = document.getElementById("file-input");
  var list = document.getElementById("upload-progress");
  var csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;

  function row(file) {
    var li = document.createElement("li");
    var name = document.createElement("span");
    name.textContent = file.name;
    var bar = document.createElement("progress");
    bar.max = 100; bar.value = 0;
    bar.setAttribute("aria-label", "Uploading " + file.name);
    var note = document.createElement("span");
    note.className = "upload-note";
    li.append(name, bar, note);
    list.appendChild(li);
    return { bar: bar, note: note, li: li };
  }

  function upload(file) {
    var ui = row(file);
    var data = new FormData();
    data.append("file", file);
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRFToken", csrf);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = function (e) { if (e.lengthComputable) ui.bar.value = Math.round(100 * e.loaded / e.total); };
    xhr.onload = function () {
      var body = {};
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
      if (xhr.status === 202 || xhr.status === 200) {
        ui.bar.value = 100;
        ui.note.textContent = xhr.status === 200 ? "already in the knowledge base" : "uploaded, processing…";
        ui.li.className = "ok";
        setTimeout(function () { window.location.reload(); }, 600);
      } else {
        ui.note.textContent = (body.error && body.error.message) || ("Upload failed (" + xhr.status + ")");
        ui.li.className = "failed";
      }
    };
    xhr.onerror = function () { ui.note.textContent = "Network error: check your connection and try again."; ui.li.className = "failed"; };
    xhr.send(data);
  }

  function send(files) { Array.prototype.forEach.call(files, upload); input.value = ""; }

  form.addEventListener("submit", function (e) { e.preventDefault(); send(input.files); });
  input.addEventListener("change", function () { send(input.files); });
  ["dragenter", "dragover"].forEach(function (type) {
    form.addEventListener(type, function (e) { e.preventDefault(); form.classList.add("dragging"); });
  });
  ["dragleave", "drop"].forEach(function (type) {
    form.addEventListener(type, function (e) { e.preventDefault(); form.classList.remove("dragging"); });
  });
  form.addEventListener("drop", function (e) { send(e.dataTransfer.files); });

  var table = document.getElementById("documents-table");
  if (!table) return;
  var labels = { pending: "Pending", processing: "Processing", ready: "Ready", failed: "Failed", deleting: "Deleting" };
  function refresh() {
    fetch(table.dataset.statusUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        var busy = false;
        data.documents.forEach(function (d) {
          var tr = table.querySelector('tr[data-document-id="' + d.id + '"]');
          if (!tr) return;
          var badge = tr.querySelector('[data-field="status"]');
          var text = labels[d.status] + (d.status === "processing" && d.progress.total ? " " + d.progress.done + "/" + d.progress.total : "");
          badge.textContent = text;
          badge.className = "badge badge-" + d.status;
          tr.querySelector('[data-field="chunk_count"]').textContent = d.chunk_count;
          tr.querySelector('[data-field="token_count"]').textContent = d.token_count;
          var err = tr.querySelector('[data-field="error"]');
          if (d.status === "failed" && !err) {
            err = document.createElement("div");
            err.className = "error-text"; err.dataset.field = "error";
            badge.parentNode.appendChild(err);
          }
          if (err) err.textContent = d.status === "failed" ? d.error : "";
          if (d.status === "pending" || d.status === "processing") busy = true;
        });
        setTimeout(refresh, busy ? 1500 : 6000);
      })
      .catch(function () { setTimeout(refresh, 6000); });
  }
  setTimeout(refresh, 1500);
})();
