// Chat page: the /ws/chat/ socket (frames as in CONTRACT.md), streamed answers rendered
// with markdown.js (safe: no innerHTML with model or document text), a sources panel,
// citations that open the cited chunk, a stop button and a clear state for every error.
// Needs app.js (Groundwork.el) and markdown.js loaded first. No build step, no framework.
(function () {
  "use strict";

  var el = Groundwork.el;
  var markdown = Groundwork.markdown;

  function bySourceNumber(list) {
    var map = {};
    (list || []).forEach(function (s) { map[s.n] = s; });
    return map;
  }

  function renderInto(node, text, sources) {
    node.replaceChildren(markdown.render(text, sources));
  }

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
    var box = el("div", { class: "notice notice-" + kind }, el("strong", null, title), text ? el("span", null, text) : null,
      actions && actions.length ? el("div", { class: "actions", style: "margin-top: .5rem" }, actions) : null);
    statusBox.replaceChildren(box);
    return box;
  }

  function linkButton(label, href) { return el("a", { class: "button btn-small", href: href }, label); }
  function actionButton(label, handler) {
    var b = el("button", { class: "btn-small", type: "button" }, label); b.addEventListener("click", handler); return b;
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
      var counter = box.appendChild(el("span"));
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
    return messages.appendChild(el("article", { class: "message user" },
      el("div", { class: "who" }, "You"), el("div", { class: "bubble" }, text)));
  }

  function addAnswer() {
    var bubble = el("div", { class: "bubble md" }, el("p", { class: "muted" }, "Looking through your documents…"));
    var article = messages.appendChild(el("article", { class: "message assistant streaming" },
      el("div", { class: "who" }, "Groundwork"), bubble));
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
    sourcesList.replaceChildren.apply(sourcesList, list.map(function (s) {
      var where = "chunk #" + s.chunk_index + (s.pages ? " · page " + markdown.pageRange(s.pages) : "");
      return el("li", { "data-n": s.n, class: citedNumbers[s.n] ? "cited" : null },
        el("span", { class: "n" }, "[" + s.n + "]"), el("a", { href: markdown.chunkUrl(s) }, s.document_name),
        el("span", { class: "where" }, where));
    }));
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
    conversationList.prepend(el("li", null, el("a", { href: url, "aria-current": "page" },
      lastQuestion.slice(0, 80), el("span", { class: "meta" }, "just now"))));
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
    return el("div", { class: "message-foot" }, parts.map(function (p) {
      return typeof p === "string" && p ? el("span", null, p) : p;
    }));
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
