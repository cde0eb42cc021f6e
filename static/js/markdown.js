// Answers' Markdown, rendered safely: Groundwork.markdown.render(text, sources) returns a
// DocumentFragment built from a small subset (paragraphs, bold headings, lists, fenced and
// inline code, bold, italic, links) in which [Document N] becomes a link to the cited chunk.
//
// Safety: model and document text never goes through innerHTML. The renderer builds DOM
// nodes with Groundwork.el (app.js), which puts every piece of text in as a text node, so
// "<script>" in an answer is shown as text; only the whitelisted formatting below becomes
// elements, and links are limited to http(s) URLs.
//
// Links: an answer's text can carry a link a document planted ("[refund portal](https://…)"),
// so a labelled link also shows the host it leads to, its title is the whole address, and it
// opens in a new tab with rel="noopener noreferrer nofollow" (README, "Chat": links in answers).
(function () {
  "use strict";
  var el = Groundwork.el;

  var SAFE_URL = /^https?:\/\/[^\s<>"']+$/i;
  var EXTERNAL = { rel: "noopener noreferrer nofollow", target: "_blank" };
  // Inline tokens, in priority order: code, citation, link, bold, italic, bare URL.
  var INLINE = new RegExp([
    "(`[^`\\n]+`)",
    "(\\[Documents?\\s+\\d+(?:\\s*(?:,|and|&)\\s*(?:Document\\s+)?\\d+)*\\])",
    "(\\[[^\\]\\n]+\\]\\([^)\\s]+\\))",
    // Only the asterisk forms: underscores are common in file and code names.
    "(\\*\\*[^\\n]+?\\*\\*)",
    "(\\*[^*\\s][^*\\n]*?\\*)",
    "(https?:\\/\\/[^\\s<>()\"']+[^\\s<>()\"'.,;:!?])"
  ].join("|"), "g");

  // Where a source (a retrieved chunk) is read; the chat's sources panel links there too.
  function chunkUrl(source) {
    var chunk = encodeURIComponent(source.chunk_index);
    return "/documents/" + encodeURIComponent(source.document_id) + "/?chunk=" + chunk + "#chunk-" + chunk;
  }

  function hostOf(url) {
    try { return new URL(url).host; } catch (e) { return url; }
  }

  function pageRange(pages) {
    return pages[0] + (pages[1] !== pages[0] ? "–" + pages[1] : "");
  }

  function citationNode(n, sources) {
    var source = sources && sources[n];
    if (!source) return document.createTextNode("[Document " + n + "]");
    var where = source.pages ? ", page " + pageRange(source.pages) : "";
    return el("a", {
      class: "citation", href: chunkUrl(source), title: source.document_name + where, "data-n": n,
      "aria-label": "Source " + n + ": " + source.document_name + where + ", chunk " + source.chunk_index
    }, "Document " + n);
  }

  // An element whose content is more inline Markdown (bold, italic and link labels).
  function inlineEl(tag, attrs, text, sources) {
    var node = el(tag, attrs);
    inline(node, text, sources);
    return node;
  }

  function inlineNode(match, sources) {
    var token = match[0];
    if (match[1]) return el("code", null, token.slice(1, -1));
    if (match[2]) {
      return el("span", { class: "citations" }, token.match(/\d+/g).map(function (n, i) {
        return [i ? " " : null, citationNode(Number(n), sources)];
      }));
    }
    if (match[3]) {
      var close = token.indexOf("](");
      var url = token.slice(close + 2, -1);
      if (!SAFE_URL.test(url)) return document.createTextNode(token);
      var link = inlineEl("a", Object.assign({ href: url, title: url, class: "external" }, EXTERNAL),
                          token.slice(1, close), sources);
      link.appendChild(el("span", { class: "link-host" }, " (" + hostOf(url) + ")"));
      return link;
    }
    if (match[4]) return inlineEl("strong", null, token.slice(2, -2), sources);
    if (match[5]) return inlineEl("em", null, token.slice(1, -1), sources);
    return el("a", Object.assign({ href: token }, EXTERNAL), token);
  }

  function inline(parent, text, sources) {
    // A regex of its own per call: bold and link labels recurse, and a shared global
    // regex's lastIndex would be reset under the outer loop.
    var pattern = new RegExp(INLINE.source, "g");
    var last = 0, match;
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      parent.appendChild(inlineNode(match, sources));
      last = match.index + match[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  var LIST_ITEM = /^\s{0,3}([-*+]|\d{1,3}[.)])\s+(.*)$/;

  // Blocks: fenced code, headings (shown as bold paragraphs: an answer has no page outline),
  // lists, paragraphs. A fence that is still open while streaming is shown as code.
  function render(text, sources) {
    var root = document.createDocumentFragment();
    var lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    var paragraph = [], list = null, i = 0;

    function flushParagraph() {
      if (!paragraph.length) return;
      var p = el("p");
      paragraph.forEach(function (line, index) {
        if (index) p.appendChild(el("br"));
        inline(p, line, sources);
      });
      root.appendChild(p);
      paragraph = [];
    }
    function flushList() { if (list) { root.appendChild(list); list = null; } }

    while (i < lines.length) {
      var line = lines[i];
      var fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
      if (fence) {
        flushParagraph(); flushList();
        var code = [];
        i += 1;
        while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) { code.push(lines[i]); i += 1; }
        root.appendChild(el("pre", null, el("code", { "data-lang": fence[1] || null }, code.join("\n"))));
        i += 1;
        continue;
      }
      if (!line.trim()) { flushParagraph(); flushList(); i += 1; continue; }
      var heading = line.match(/^\s{0,3}#{1,6}\s+(.*)$/);
      if (heading) {
        flushParagraph(); flushList();
        root.appendChild(el("p", null, inlineEl("strong", null, heading[1].replace(/\s#+\s*$/, ""), sources)));
        i += 1;
        continue;
      }
      var item = line.match(LIST_ITEM);
      if (item) {
        flushParagraph();
        var ordered = /\d/.test(item[1]);
        if (list && (list.tagName === "OL") !== ordered) flushList();
        if (!list) {
          var start = ordered ? parseInt(item[1], 10) : 1;
          list = el(ordered ? "ol" : "ul", { start: start > 1 ? start : null });
        }
        list.appendChild(inlineEl("li", null, item[2], sources));
        i += 1;
        continue;
      }
      if (list && /^\s{2,}\S/.test(line)) {  // a list item's continuation line
        list.lastChild.appendChild(document.createTextNode(" "));
        inline(list.lastChild, line.trim(), sources);
        i += 1;
        continue;
      }
      flushList();
      paragraph.push(line);
      i += 1;
    }
    flushParagraph(); flushList();
    return root;
  }

  Groundwork.markdown = { render: render, chunkUrl: chunkUrl, pageRange: pageRange };
})();
