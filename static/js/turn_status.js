// What a chat turn says about its search (chat.js shows it on the answer, before any token):
// Groundwork.turnStatus.found(frame) for a chat.sources frame, "Found 3 passages in
// handbook.pdf (p. 7), guide.docx" (document names as given: chat.js puts them in as text),
// small talk, or what the documents do not cover: a searched turn routed "general" (the
// "Your documents don't cover this" reply with the closest passages, or a capable model's
// general answer), read from the frame itself, never from the answer's words.
(function () {
  "use strict";

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
    if (frame.route === "general" && searched) {
      // Not the reply's own words ("Your documents don't cover this."), which follow it.
      return "Searched your documents: nothing near enough to answer from" +
        (list.length ? "; the closest passages are listed." : ".");
    }
    if (list.length) return foundText(list);
    if (frame.route === "general") return "Small talk: no need to search your documents.";
    return "Nothing in your documents matches this question.";
  }

  Groundwork.turnStatus = { found: found };
})();
