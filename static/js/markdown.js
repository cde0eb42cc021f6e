// Answers' Markdown: Groundwork.markdown.render(text, sources) returns a DocumentFragment,
// rendered by markdown-it and then cleaned by DOMPurify (both vendored: static/vendor/README.md),
// in which [Document N] becomes a link to the cited chunk.
//
// Safety, in two layers. markdown-it runs with `html: false`, so "<script>" or
// "<img onerror=…>" in an answer (or in a document the answer quotes) is escaped text, and
// links are kept only for http(s) and mailto (citations link to the app's /documents/ paths). DOMPurify then
// keeps only the tags and attributes listed below (and data-* attributes, which run nothing):
// whatever a renderer bug let through, no script, no on* handler, no style attribute (the CSP
// forbids them too) reaches the page.
//
// Links: an answer's text can carry a link a document planted ("[refund portal](https://…)"),
// so a labelled link also shows the host it leads to, its title is the whole address, and it
// opens in a new tab with rel="noopener noreferrer nofollow" (docs/guide/chat.md, "Links in answers").
// Images are not rendered: an image in an answer would fetch a URL a document chose.
(function () {
  "use strict";

  var SAFE_LINK = /^(?:https?:\/\/|mailto:)[^\s<>"']+$/i;
  var CITATION = /^\[Documents?\s+\d+(?:\s*(?:,|and|&)\s*(?:Document\s+)?\d+)*\]/;
  var TAGS = ["a", "p", "br", "strong", "em", "s", "del", "code", "pre", "ul", "ol", "li", "blockquote", "hr",
              "table", "thead", "tbody", "tr", "th", "td", "div", "span"];
  var ATTRS = ["href", "title", "class", "rel", "target", "start", "data-n", "aria-label"];
  var PURIFY = { ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ATTRS, ALLOW_DATA_ATTR: true, RETURN_DOM_FRAGMENT: true,
                 ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|\/documents\/)/i };

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

  var md = window.markdownit({ html: false, linkify: true, typographer: false, breaks: true });
  md.disable("image");
  md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
  md.validateLink = function (url) { return SAFE_LINK.test(url); };
  var escape = md.utils.escapeHtml;

  // [Document 3] and [Documents 1, 2 and 4]: read before markdown-it's own links, so a
  // reference definition an answer carries ("[Document 1]: https://…") cannot turn one into
  // a link elsewhere.
  md.inline.ruler.before("link", "citation", function (state, silent) {
    if (state.src.charCodeAt(state.pos) !== 0x5B /* [ */) return false;
    var match = CITATION.exec(state.src.slice(state.pos));
    if (!match) return false;
    if (!silent) state.push("citation", "", 0).meta = { numbers: match[0].match(/\d+/g).map(Number) };
    state.pos += match[0].length;
    return true;
  });

  function citationHtml(n, sources) {
    var source = sources && sources[n];
    if (!source) return escape("[Document " + n + "]");
    var where = source.pages ? ", page " + pageRange(source.pages) : "";
    return '<a class="citation" href="' + escape(chunkUrl(source)) + '" title="' + escape(source.document_name + where) +
      '" data-n="' + n + '" aria-label="' + escape("Source " + n + ": " + source.document_name + where + ", chunk " +
      source.chunk_index) + '">Document ' + n + "</a>";
  }

  var rules = md.renderer.rules;
  rules.citation = function (tokens, idx, options, env) {
    return '<span class="citations">' + tokens[idx].meta.numbers.map(function (n) {
      return citationHtml(n, env.sources);
    }).join(" ") + "</span>";
  };
  rules.link_open = function (tokens, idx, options, env, self) {
    var token = tokens[idx], href = token.attrGet("href");
    token.attrSet("title", href);
    token.attrSet("rel", "noopener noreferrer nofollow");
    token.attrSet("target", "_blank");
    // A labelled link shows where it leads (its close tag adds the host); a bare URL says it.
    var labelled = token.markup !== "linkify" && token.markup !== "autolink";
    if (labelled) token.attrSet("class", "external");
    env.hosts.push(labelled ? hostOf(href) : null);
    return self.renderToken(tokens, idx, options);
  };
  rules.link_close = function (tokens, idx, options, env) {
    var host = env.hosts.pop();
    return (host ? '<span class="link-host"> (' + escape(host) + ")</span>" : "") + "</a>";
  };
  // Headings are bold paragraphs: an answer has no page outline.
  rules.heading_open = function () { return '<p class="md-heading"><strong>'; };
  rules.heading_close = function () { return "</strong></p>\n"; };
  // Wide tables scroll inside their box, not the page; alignment is a class (no style attribute).
  rules.table_open = function () { return '<div class="table-wrap"><table>\n'; };
  rules.table_close = function () { return "</table></div>\n"; };
  function cell(tag) {
    return function (tokens, idx) {
      var align = /text-align:(left|right|center)/.exec(tokens[idx].attrGet("style") || "");
      return "<" + tag + (align ? ' class="align-' + align[1] + '"' : "") + ">";
    };
  }
  rules.th_open = cell("th");
  rules.td_open = cell("td");

  // Only what the renderer writes survives; external links always open apart.
  DOMPurify.addHook("afterSanitizeAttributes", function (node) {
    if (node.tagName === "A" && !/^\/documents\//.test(node.getAttribute("href") || "")) {
      node.setAttribute("rel", "noopener noreferrer nofollow");
      node.setAttribute("target", "_blank");
    }
  });

  // Set once: DOMPurify otherwise parses the configuration again on every call, and a
  // streaming answer is rendered many times.
  DOMPurify.setConfig(PURIFY);

  function render(text, sources) {
    var html = md.render(String(text), { sources: sources || {}, hosts: [] });
    var fragment = DOMPurify.sanitize(html);
    return fragment.ownerDocument === document ? fragment : document.importNode(fragment, true);
  }

  Groundwork.markdown = { render: render, chunkUrl: chunkUrl, pageRange: pageRange };
})();
