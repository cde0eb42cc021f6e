// Chat page: the /ws/chat/ socket (frames as in CONTRACT.md), streamed answers rendered
// from a small, safe Markdown subset, a sources panel, citations that open the cited
// chunk, a stop button and a clear state for every error. No build step, no framework.
//
// Safety: model and document text never goes through innerHTML. The renderer builds DOM
// nodes and puts every piece of text in with textContent, so "<script>" in an answer is
// shown as text; only the whitelisted formatting below becomes elements, and links are
// limited to http(s) URLs.
(function () {
  "use strict";

  // ---------- Safe Markdown ----------------------------------------------------------

  var SAFE_URL = /^https?:\/\/[^\s<>"']+$/i;
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

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text != null) node.textContent = text;
    return node;
  }

  function citationNode(n, sources) {
    var source = sources && sources[n];
    if (!source) return document.createTextNode("[Document " + n + "]");
    var link = el("a", "citation", "Document " + n);
    link.href = "/documents/" + encodeURIComponent(source.document_id) + "/?chunk=" +
      encodeURIComponent(source.chunk_index) + "#chunk-" + encodeURIComponent(source.chunk_index);
    var where = source.pages ? ", page " + source.pages[0] + (source.pages[1] !== source.pages[0] ? "–" + source.pages[1] : "") : "";
    link.setAttribute("aria-label", "Source " + n + ": " + source.document_name + where + ", chunk " + source.chunk_index);
    link.title = source.document_name + where;
    link.dataset.n = n;
    return link;
  }

  function inline(parent, text, sources) {
    // A regex of its own per call: bold and link labels recurse, and a shared global
    // regex's lastIndex would be reset under the outer loop.
    var pattern = new RegExp(INLINE.source, "g");
    var last = 0, match;
    while ((match = pattern.exec(text)) !== null) {
      if (match.index > last) parent.appendChild(document.createTextNode(text.slice(last, match.index)));
      var token = match[0];
      if (match[1]) {
        parent.appendChild(el("code", null, token.slice(1, -1)));
      } else if (match[2]) {
        var numbers = token.match(/\d+/g);
        var group = el("span", "citations");
        numbers.forEach(function (n, i) {
          if (i) group.appendChild(document.createTextNode(" "));
          group.appendChild(citationNode(Number(n), sources));
        });
        parent.appendChild(group);
      } else if (match[3]) {
        var close = token.indexOf("](");
        var label = token.slice(1, close), url = token.slice(close + 2, -1);
        if (SAFE_URL.test(url)) {
          var a = el("a");
          a.href = url; a.rel = "noopener noreferrer nofollow"; a.target = "_blank";
          inline(a, label, sources);
          parent.appendChild(a);
        } else {
          parent.appendChild(document.createTextNode(token));
        }
      } else if (match[4]) {
        var strong = el("strong");
        inline(strong, token.slice(2, -2), sources);
        parent.appendChild(strong);
      } else if (match[5]) {
        var em = el("em");
        inline(em, token.slice(1, -1), sources);
        parent.appendChild(em);
      } else if (match[6]) {
        var bare = el("a", null, token);
        bare.href = token; bare.rel = "noopener noreferrer nofollow"; bare.target = "_blank";
        parent.appendChild(bare);
      }
      last = match.index + token.length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  var LIST_ITEM = /^\s{0,3}([-*+]|\d{1,3}[.)])\s+(.*)$/;

  // Blocks: fenced code, headings (shown as bold paragraphs: an answer has no page outline),
  // lists, paragraphs. A fence that is still open while streaming is shown as code.
  function renderMarkdown(text, sources) {
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
        var pre = el("pre"), codeNode = el("code", null, code.join("\n"));
        if (fence[1]) codeNode.dataset.lang = fence[1];
        pre.appendChild(codeNode);
        root.appendChild(pre);
        i += 1;
        continue;
      }
      if (!line.trim()) { flushParagraph(); flushList(); i += 1; continue; }
      var heading = line.match(/^\s{0,3}#{1,6}\s+(.*)$/);
      if (heading) {
        flushParagraph(); flushList();
        var h = el("p"), strong = el("strong");
        inline(strong, heading[1].replace(/\s#+\s*$/, ""), sources);
        h.appendChild(strong);
        root.appendChild(h);
        i += 1;
        continue;
      }
      var item = line.match(LIST_ITEM);
      if (item) {
        flushParagraph();
        var ordered = /\d/.test(item[1]);
        if (list && (list.tagName === "OL") !== ordered) flushList();
        if (!list) {
          list = el(ordered ? "ol" : "ul");
          if (ordered && parseInt(item[1], 10) > 1) list.start = parseInt(item[1], 10);
        }
        var li = el("li");
        inline(li, item[2], sources);
        list.appendChild(li);
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

  function bySourceNumber(list) {
    var map = {};
    (list || []).forEach(function (s) { map[s.n] = s; });
    return map;
  }

  function renderInto(node, text, sources) {
    node.replaceChildren(renderMarkdown(text, sources));
  }

  // Exposed for the browser tests and for a console check; nothing else uses it.
  window.GroundworkMarkdown = { render: renderMarkdown };

  // ---------- Page -------------------------------------------------------------------

  var root = document.getElementById("chat");
  if (!root) return;
  var messages = document.getElementById("messages");
  var form = document.getElementById("chat-form");
  var input = document.getElementById("chat-input");
  var sendButton = document.getElementById("send-button");
  var stopButton = document.getElementById("stop-button");
  var statusBox = document.getElementById("chat-status");
  var connection = document.getElementById("connection");
  var sourcesList = document.getElementById("sources");
  var sourcesEmpty = document.getElementById("sources-empty");
  var conversationList = document.getElementById("conversation-list");
  var heading = document.getElementById("chat-heading");

  var conversationId = root.dataset.conversationId || null;
  var socket = null, reconnectDelay = 1000, reconnectTimer = null, closedForGood = false;
  var current = null;       // the answer being written: {article, bubble, text, sources, question, gotSources}
  var lastQuestion = "";
  var rateLimitTimer = null;

  // Server-rendered history: turn each stored answer's text into formatted, linked text.
  var stored = {};
  var storedNode = document.getElementById("chat-citations");
  if (storedNode) { try { stored = JSON.parse(storedNode.textContent); } catch (e) { stored = {}; } }
  messages.querySelectorAll("[data-markdown]").forEach(function (bubble) {
    var id = bubble.closest("[data-message-id]").dataset.messageId;
    renderInto(bubble, bubble.textContent, bySourceNumber(stored[id]));
  });
  scrollToEnd();

  function scrollToEnd() {
    var last = messages.lastElementChild;
    if (last && last.scrollIntoView) last.scrollIntoView({ block: "end" });
  }

  function setConnection(state, label) {
    connection.dataset.state = state;
    connection.textContent = label;
  }

  function setBusy(busy) {
    messages.setAttribute("aria-busy", busy ? "true" : "false");
    sendButton.hidden = busy;
    stopButton.hidden = !busy;
    stopButton.disabled = false;
    if (busy) stopButton.focus(); else if (document.activeElement === stopButton) input.focus();
  }

  function updateSendable() {
    sendButton.disabled = !socket || socket.readyState !== WebSocket.OPEN || rateLimitTimer !== null;
  }

  // ---------- Status and error states ------------------------------------------------

  function clearStatus() { statusBox.replaceChildren(); }

  function showStatus(kind, title, text, actions) {
    var box = el("div", "notice notice-" + kind);
    box.appendChild(el("strong", null, title));
    if (text) box.appendChild(el("span", null, text));
    if (actions && actions.length) {
      var row = el("div", "actions");
      row.style.marginTop = ".5rem";
      actions.forEach(function (a) { row.appendChild(a); });
      box.appendChild(row);
    }
    statusBox.replaceChildren(box);
    return box;
  }

  function linkButton(label, href) { var a = el("a", "button btn-small", label); a.href = href; return a; }
  function actionButton(label, handler) {
    var b = el("button", "btn-small", label); b.type = "button"; b.addEventListener("click", handler); return b;
  }

  function retryButton() {
    return actionButton("Try again", function () { clearStatus(); if (lastQuestion) ask(lastQuestion); });
  }

  function showError(code, message) {
    if (code === "insufficient_credits") {
      showStatus("warn", "Not enough credits", (message || "") +
        " Answers are paid in credits (1 credit = 1 model token). An owner of your team can add credits; " +
        "the credits page shows your balance and what used it.",
        [linkButton("See credits", root.dataset.creditsUrl)]);
    } else if (code === "rate_limited") {
      var seconds = parseInt(((message || "").match(/(\d+)\s*s\b/) || [])[1] || "10", 10);
      var box = showStatus("warn", "Slow down a little", message || "Too many messages in a short time.");
      var counter = el("span", null, "");
      box.appendChild(counter);
      if (rateLimitTimer) clearInterval(rateLimitTimer);
      var left = seconds;
      counter.textContent = " You can send again in " + left + " s.";
      rateLimitTimer = setInterval(function () {
        left -= 1;
        if (left <= 0) {
          clearInterval(rateLimitTimer); rateLimitTimer = null;
          counter.textContent = " You can send again now.";
          updateSendable();
        } else {
          counter.textContent = " You can send again in " + left + " s.";
        }
      }, 1000);
      updateSendable();
    } else if (code === "provider_unavailable") {
      showStatus("error", "The model is unavailable right now",
        (message ? message + " " : "") + "Nothing is charged for an answer that was not written. Try again in a moment.",
        [retryButton()]);
    } else if (code === "not_found") {
      showStatus("error", "This conversation is gone", message || "", [linkButton("Start a new conversation", root.dataset.conversationUrl)]);
    } else if (code === "bad_request") {
      showStatus("error", "That message could not be sent", message || "");
    } else {
      showStatus("error", "Something went wrong", (message || "") + " Please try again.", [retryButton()]);
    }
  }

  // ---------- Messages ----------------------------------------------------------------

  function removeEmptyState() {
    var empty = document.getElementById("chat-empty");
    if (empty) empty.remove();
  }

  function addUserMessage(text) {
    removeEmptyState();
    var article = el("article", "message user");
    article.appendChild(el("div", "who", "You"));
    article.appendChild(el("div", "bubble", text));
    messages.appendChild(article);
    return article;
  }

  function addAnswer() {
    var article = el("article", "message assistant streaming");
    article.appendChild(el("div", "who", "Groundwork"));
    var bubble = el("div", "bubble md");
    bubble.appendChild(el("p", "muted", "Looking through your documents…"));
    article.appendChild(bubble);
    messages.appendChild(article);
    scrollToEnd();
    return { article: article, bubble: bubble, text: "", sources: {}, gotSources: false, frame: 0 };
  }

  function renderCurrent() {
    if (!current || current.frame) return;
    // One render per animation frame, however many tokens arrived in it.
    current.frame = requestAnimationFrame(function () {
      if (!current) return;
      current.frame = 0;
      renderInto(current.bubble, current.text, current.sources);
      scrollToEnd();
    });
  }

  function renderSources(list, cited) {
    var citedNumbers = {};
    (cited || []).forEach(function (c) { citedNumbers[c.n] = true; });
    sourcesList.replaceChildren();
    list.forEach(function (s) {
      var li = el("li");
      li.dataset.n = s.n;
      if (citedNumbers[s.n]) li.className = "cited";
      li.appendChild(el("span", "n", "[" + s.n + "]"));
      var link = el("a", null, s.document_name);
      link.href = "/documents/" + encodeURIComponent(s.document_id) + "/?chunk=" + encodeURIComponent(s.chunk_index) +
        "#chunk-" + encodeURIComponent(s.chunk_index);
      li.appendChild(link);
      var where = "chunk #" + s.chunk_index;
      if (s.pages) where += " · page " + s.pages[0] + (s.pages[1] !== s.pages[0] ? "–" + s.pages[1] : "");
      li.appendChild(el("span", "where", where));
      sourcesList.appendChild(li);
    });
    sourcesEmpty.hidden = list.length > 0;
    if (!list.length) sourcesEmpty.textContent = "No passages were used for this answer: it comes from general knowledge.";
  }

  function rememberConversation(id) {
    if (conversationId) return;
    conversationId = String(id);
    root.dataset.conversationId = conversationId;
    var url = root.dataset.conversationUrl + encodeURIComponent(conversationId) + "/";
    if (window.history && history.replaceState) history.replaceState(null, "", url);
    var placeholder = document.getElementById("no-conversations");
    if (placeholder) placeholder.remove();
    conversationList.hidden = false;
    conversationList.querySelectorAll("[aria-current]").forEach(function (a) { a.removeAttribute("aria-current"); });
    var li = el("li"), a = el("a", null, lastQuestion.slice(0, 80));
    a.href = url;
    a.setAttribute("aria-current", "page");
    a.appendChild(el("span", "meta", "just now"));
    li.appendChild(a);
    conversationList.prepend(li);
    heading.textContent = lastQuestion.slice(0, 80);
  }

  function finishAnswer(foot) {
    if (!current) return;
    if (current.frame) cancelAnimationFrame(current.frame);
    current.article.classList.remove("streaming");
    if (current.text) {
      renderInto(current.bubble, current.text, current.sources);
    } else {
      current.bubble.replaceChildren();
    }
    if (foot) current.article.appendChild(foot);
    current = null;
    setBusy(false);
    scrollToEnd();
  }

  function footer(parts) {
    var foot = el("div", "message-foot");
    parts.forEach(function (p) { if (p) foot.appendChild(typeof p === "string" ? el("span", null, p) : p); });
    return foot;
  }

  function setBalance(value) {
    var node = document.querySelector("#header-balance [data-balance]");
    if (node && typeof value === "number") node.textContent = String(value);
  }

  // ---------- Frames --------------------------------------------------------------------

  function onFrame(frame) {
    if (!frame || typeof frame.type !== "string") return;
    if (frame.type === "chat.sources") {
      if (!current) return;
      current.gotSources = true;
      current.sources = bySourceNumber(frame.sources);
      current.bubble.replaceChildren();
      rememberConversation(frame.conversation_id);
      renderSources(frame.sources || [], []);
    } else if (frame.type === "chat.token") {
      if (!current) return;
      current.text += frame.text || "";
      renderCurrent();
    } else if (frame.type === "chat.done") {
      if (!current) return;
      if (frame.citations) renderSources(Object.keys(current.sources).map(function (k) { return current.sources[k]; }), frame.citations);
      var used = frame.usage && frame.usage.total_tokens;
      var stopped = frame.status === "cancelled";
      finishAnswer(footer([stopped ? "Stopped before the end." : "", used ? used + " credits" : ""]));
      if (stopped && !messages.lastElementChild.querySelector(".bubble").textContent) {
        messages.lastElementChild.querySelector(".bubble").textContent = "(stopped before any text)";
      }
      setBalance(frame.credits_remaining);
    } else if (frame.type === "chat.error") {
      if (current && !current.gotSources) {
        // Nothing was stored: take the question back so it can be sent again.
        var pending = current;
        current = null;
        pending.article.remove();
        if (pending.userArticle) pending.userArticle.remove();
        if (!input.value) input.value = pending.question;
        setBusy(false);
      } else if (current) {
        finishAnswer(footer([current.text ? "The answer was cut off." : "No answer was written."]));
      }
      showError(frame.code, frame.message);
    }
  }

  // ---------- Socket ----------------------------------------------------------------------

  function connect() {
    clearTimeout(reconnectTimer);
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setConnection("connecting", "Connecting…");
    socket = new WebSocket(scheme + location.host + root.dataset.wsPath);
    socket.addEventListener("open", function () {
      reconnectDelay = 1000;
      setConnection("open", "Connected");
      var lost = statusBox.querySelector("[data-connection-lost]");
      if (lost) clearStatus();
      updateSendable();
      // A question typed before the socket was ready is sent now, not dropped.
      if (waitingQuestion && ask(waitingQuestion)) { waitingQuestion = null; input.value = ""; autosize(); }
    });
    socket.addEventListener("message", function (event) {
      var frame;
      try { frame = JSON.parse(event.data); } catch (e) { return; }
      onFrame(frame);
    });
    socket.addEventListener("close", function (event) {
      updateSendable();
      if (current) {
        finishAnswer(footer([current.text ? "The connection dropped: the answer was cut off." : "The connection dropped before an answer."]));
      }
      if (event.code === 4401) {
        closedForGood = true;
        setConnection("closed", "Signed out");
        showStatus("error", "You are signed out", "Log in again to keep chatting.", [linkButton("Log in", "/login/?next=" + encodeURIComponent(location.pathname))]);
        return;
      }
      if (event.code === 4403) {
        closedForGood = true;
        setConnection("closed", "Refused");
        showStatus("error", "This page's address is not allowed to chat", "Open Groundwork from its usual address and try again.");
        return;
      }
      setConnection("closed", "Disconnected");
      var box = showStatus("warn", "Connection lost", "Reconnecting in " + Math.round(reconnectDelay / 1000) + " s…",
        [actionButton("Reconnect now", connect)]);
      box.dataset.connectionLost = "1";
      reconnectTimer = setTimeout(connect, reconnectDelay);
      reconnectDelay = Math.min(reconnectDelay * 2, 15000);
    });
  }

  function ask(text) {
    if (!socket || socket.readyState !== WebSocket.OPEN || current) return false;
    lastQuestion = text;
    clearStatus();
    var userArticle = addUserMessage(text);
    current = addAnswer();
    current.question = text;
    current.userArticle = userArticle;
    setBusy(true);
    var frame = { type: "chat.message", message: text };
    if (conversationId) frame.conversation_id = Number(conversationId);
    socket.send(JSON.stringify(frame));
    return true;
  }

  var waitingQuestion = null;
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = input.value.trim();
    if (!text) { input.focus(); return; }
    if (rateLimitTimer) return;
    if (ask(text)) { input.value = ""; autosize(); return; }
    if (!current && (!socket || socket.readyState !== WebSocket.OPEN)) {
      waitingQuestion = text;
      showStatus("info", "Connecting…", "Your question is sent as soon as the connection is ready.");
    }
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (typeof form.requestSubmit === "function") form.requestSubmit(); else form.dispatchEvent(new Event("submit", { cancelable: true }));
    }
  });
  function autosize() { input.style.height = "auto"; input.style.height = Math.min(input.scrollHeight + 2, 192) + "px"; }
  input.addEventListener("input", autosize);
  stopButton.addEventListener("click", function () {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "chat.cancel" }));
    stopButton.disabled = true;
  });
  window.addEventListener("online", function () { if (!closedForGood && socket.readyState === WebSocket.CLOSED) connect(); });

  updateSendable();
  connect();
})();
