// What a chat turn says about its search (chat.js shows it on the answer, before any token):
// Groundwork.turnStatus.found(frame) for a chat.sources frame, "Found 3 passages in
// handbook.pdf (p. 7), guide.docx" (document names as given: chat.js puts them in as text),
// small talk, or nothing found; afterAnswer(line, answer, sources) once the answer is written,
// which says so when the answer is "Your documents don't cover this".
(function () {
  "use strict";

  // Said at the start of the answer (after a note the turn may put first).
  var NOT_COVERED = /your documents don['’]t cover this/i;

  // By document, in the order of the sources, with the pages its passages came from.
  function foundText(list) {
    var documents = [], byName = {};
    list.forEach(function (s) {
      var name = s.document_name || "a document no longer available to you";
      if (!byName[name]) { byName[name] = { name: name, pages: [] }; documents.push(byName[name]); }
      if (s.pages && byName[name].pages.indexOf(s.pages[0]) < 0) byName[name].pages.push(s.pages[0]);
    });
    var names = documents.map(function (d) {
      if (!d.pages.length) return d.name;
      d.pages.sort(function (a, b) { return a - b; });
      return d.name + " (p" + (d.pages.length > 1 ? "p. " : ". ") + d.pages.join(", ") + ")";
    });
    return "Found " + list.length + " passage" + (list.length === 1 ? "" : "s") + " in " + names.join(", ");
  }

  function found(frame) {
    var list = frame.sources || [];
    var searched = typeof frame.query === "string" && frame.query.trim() !== "";
    if (list.length) return foundText(list);
    if (frame.route === "general" && !searched) return "Small talk: no need to search your documents.";
    return "Nothing in your documents matches this question.";
  }

  function afterAnswer(line, answer, sources) {
    if (!NOT_COVERED.test(String(answer || "").slice(0, 300))) return line;
    return "Your documents don't cover this" + (sources && sources.length ? ": the closest passages are listed below." : ".");
  }

  Groundwork.turnStatus = { found: found, afterAnswer: afterAnswer };
})();
