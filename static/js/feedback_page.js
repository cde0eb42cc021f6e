// The Feedback page: each rated answer's text rendered as the chat page renders it
// (markdown.js), its [Document N] linked to the sources it was given. Without this script
// the page still shows the answer as plain text.
(function () {
  "use strict";
  var node = document.getElementById("feedback-citations");
  var citations = {};
  if (node) { try { citations = JSON.parse(node.textContent); } catch (e) { citations = {}; } }
  document.querySelectorAll(".feedback-answer [data-markdown]").forEach(function (answer) {
    var sources = {};
    (citations[answer.dataset.messageId] || []).forEach(function (s) { sources[s.n] = s; });
    answer.replaceChildren(Groundwork.markdown.render(answer.textContent, sources));
    answer.classList.add("rendered");
  });
})();
