// Document page: bring a cited chunk into view and focus, and refresh once a document that
// is still being processed becomes ready or fails (its chunks are rendered on the server).
(function () {
  "use strict";
  var cited = document.querySelector(".chunk.highlight");
  if (cited) {
    cited.scrollIntoView({ block: "center" });
    cited.focus({ preventScroll: true });
  }
  var details = document.getElementById("document-details");
  if (!details || (details.dataset.status !== "pending" && details.dataset.status !== "processing")) return;
  var id = Number(details.dataset.documentId);
  var badge = document.getElementById("document-status");
  var estimate = document.getElementById("document-estimate");
  function check() {
    fetch(details.dataset.statusUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        var d = data && data.documents.filter(function (x) { return x.id === id; })[0];
        if (!d) { setTimeout(check, 4000); return; }
        if (d.status === "ready" || d.status === "failed") { window.location.reload(); return; }
        var words = Groundwork.progressText(d.status, d.progress);
        badge.textContent = (d.status === "processing" ? "Processing" : "Pending") + (words ? " · " + words : "");
        badge.className = "badge badge-" + d.status;
        // Known once the file is parsed and chunked, before anything is embedded.
        if (estimate && d.credits_estimate) estimate.textContent = "about " + Groundwork.plural(d.credits_estimate, "credit");
        setTimeout(check, 1500);
      })
      .catch(function () { setTimeout(check, 4000); });
  }
  setTimeout(check, 1500);
})();
