// Chat page: the /ws/chat/ socket (frames as in docs/api/websocket.md), streamed answers rendered
// with markdown.js (safe: no innerHTML with model or document text), a sources panel,
// citations that open the cited chunk, under each answer the sources it cites apart from
// those merely retrieved, the turn's state ("Searching your documents…", then what the search
// found, "Writing the answer…" until the first token, "Writing…", "Stopped") on the answer and
// in a live region, a stop button and a clear state for every error. Conversations: rename
// and delete (PATCH / DELETE /api/v1/conversations/{id}/; the socket's conversation.deleted
// closes it in every open tab), "Copy" on each answer (its text and cited sources as plain
// text) and "Regenerate" on the last one (chat.regenerate: the new answer is added below, the
// old one kept as a previous version).
// Needs app.js (Groundwork.el), markdown.js, turn_status.js and feedback.js loaded first. No build step, no framework.
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
  var liveState = document.getElementById("turn-state");

  var conversationId = root.dataset.conversationId || null;
  var socket = null, reconnectDelay = 1000, reconnectTimer = null, closedForGood = false;
  var current = null;       // the answer being written: {article, bubble, state, text, sources, question, gotSources}
  var lastQuestion = "";
  var rateLimitTimer = null;

  // What "Copy" copies: each answer's own text, as written (with its [Document N] markers).
  var answerText = new WeakMap();

  // Server-rendered history: turn each stored answer's text into formatted, linked text.
  var stored = {};
  var storedNode = document.getElementById("chat-citations");
  if (storedNode) { try { stored = JSON.parse(storedNode.textContent); } catch (e) { stored = {}; } }
  messages.querySelectorAll("[data-markdown]").forEach(function (bubble) {
    var article = bubble.closest("[data-message-id]");
    answerText.set(article, bubble.textContent);
    renderInto(bubble, bubble.textContent, bySourceNumber(stored[article.dataset.messageId]));
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
      actions && actions.length ? el("div", { class: "actions mt-s" }, actions) : null);
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

  // A question stored without an answer (the model server busy or unreachable: the error
  // said where it is stored) is asked again as it is, chat.regenerate: its answer comes below
  // it and the thread never gets a second copy of the question.
  function retryQuestion() {
    if (!socket || socket.readyState !== WebSocket.OPEN || current || !conversationId) return false;
    clearStatus();
    messages.querySelectorAll(".message.unanswered").forEach(function (a) { a.remove(); });
    regenerateButton.remove();
    current = addAnswer();
    current.question = lastQuestion;
    setState(current, "searching", "Asking again: searching your documents…");
    setBusy(true);
    socket.send(JSON.stringify({ type: "chat.regenerate", conversation_id: Number(conversationId) }));
    return true;
  }

  function retryQuestionButton() {
    var b = actionButton("Retry", retryQuestion);
    b.classList.add("retry-question");
    return b;
  }

  function showError(code, message, stored) {
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
        (message ? message + " " : "") + "Nothing is charged for an answer that was not written. " +
        (stored ? "Your question is kept in this conversation: retry it in a moment." : "Try again in a moment."),
        [stored ? retryQuestionButton() : retryButton()]);
    } else if (code === "not_found") {
      showStatus("error", "This conversation is gone", message || "", [linkButton("Start a new conversation", root.dataset.conversationUrl)]);
    } else if (code === "bad_request") {
      showStatus("error", "That message could not be sent", message || "");
    } else {
      showStatus("error", "Something went wrong", (message || "") + " Please try again.",
        [stored ? retryQuestionButton() : retryButton()]);
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
    var bubble = el("div", { class: "bubble md" });
    var state = el("p", { class: "turn-state" });
    var article = messages.appendChild(el("article", { class: "message assistant streaming" },
      el("div", { class: "who" }, "Groundwork"), state, bubble));
    scrollToEnd();
    return { article: article, bubble: bubble, state: state, text: "", sources: {}, gotSources: false, frame: 0 };
  }

  // The turn's state, shown on its answer and read out by the live region. No name: the
  // state line goes (a finished answer needs none); "stopped" and "failed" stay on the message.
  function setState(answer, name, text, announce) {
    if (!name) { answer.state.remove(); return; }
    answer.state.dataset.state = name;
    answer.state.textContent = text;
    liveState.textContent = announce || text;
  }

  function sameQuestion(a, b) {
    var norm = function (t) { return String(t || "").replace(/\s+/g, " ").trim().toLowerCase(); };
    return norm(a) === norm(b);
  }

  function sourceItem(s) {
    var where = "chunk #" + s.chunk_index + (s.pages ? " · page " + markdown.pageRange(s.pages) : "") + (s.ocr ? " (OCR)" : "");
    return el("li", { "data-n": s.n },
      el("a", { class: "source-link", href: markdown.chunkUrl(s), title: s.document_name },
        el("span", { class: "n" }, "[" + s.n + "]"), " ", el("span", { class: "source-name" }, s.document_name)),
      el("span", { class: "where" }, where));
  }

  // Under an answer: what it cites, then (collapsed) what was retrieved and not cited; the
  // same markup as templates/chat/_answer_sources.html renders for the history.
  function answerSources(sources, citations) {
    var citedNumbers = {};
    citations.forEach(function (c) { citedNumbers[c.n] = true; });
    var others = sources.filter(function (s) { return !citedNumbers[s.n]; });
    if (!citations.length && !others.length) return null;
    return el("div", { class: "answer-sources" },
      citations.length ? [el("p", { class: "sources-label" }, "Cited"),
        el("ol", { class: "source-list cited-sources" }, citations.map(sourceItem))]
        : el("p", { class: "no-cited" }, "No sources cited."),
      others.length ? el("details", { class: "also-retrieved" },
        el("summary", null, "Also retrieved (" + others.length + ")"),
        el("ol", { class: "source-list" }, others.map(sourceItem))) : null);
  }

  // While it streams, the answer is rendered again as tokens arrive (the whole answer is
  // parsed and sanitized each time), and always once at the end. Throttled: at most once per
  // RENDER_EVERY ms, and never more than a third of the time (a long answer on a slow machine:
  // markdown-it + DOMPurify took 30-80 ms for 3,000 characters on this repo's loaded 2 cores).
  var RENDER_EVERY = 80;
  function renderCurrent() {
    if (!current || current.frame) return;
    var gap = Math.max(RENDER_EVERY, 3 * (current.renderCost || 0));
    var wait = Math.max(0, gap - (Date.now() - (current.renderedAt || 0)));
    current.frame = setTimeout(function () {
      if (!current) return;
      current.frame = 0;
      var started = Date.now();
      renderInto(current.bubble, current.text, current.sources);
      current.renderedAt = Date.now();
      current.renderCost = current.renderedAt - started;
      scrollToEnd();
    }, wait);
  }

  // What the search found, said on the answer before its first token (turn_status.js).
  function showFound(answer, frame) {
    var text = Groundwork.turnStatus.found(frame);
    answer.found = answer.article.insertBefore(el("p", { class: "found-passages" }, text), answer.state);
    return text;
  }

  function renderSources(list, cited) {
    var citedNumbers = {};
    (cited || []).forEach(function (c) { citedNumbers[c.n] = true; });
    sourcesList.replaceChildren.apply(sourcesList, list.map(function (s) {
      var where = "chunk #" + s.chunk_index + (s.pages ? " · page " + markdown.pageRange(s.pages) : "") + (s.ocr ? " (OCR)" : "");
      return el("li", { "data-n": s.n, class: citedNumbers[s.n] ? "cited" : null },
        el("span", { class: "n" }, "[" + s.n + "]"), el("a", { href: markdown.chunkUrl(s), title: s.document_name }, s.document_name),
        el("span", { class: "where" }, where));
    }));
    sourcesEmpty.hidden = list.length > 0;
    if (!list.length) sourcesEmpty.textContent = "No passages were used for this answer: it comes from general knowledge.";
  }

  // The conversation's title as the server named it (its first real question; "" while only
  // small talk was said), shown the way the page shows an untitled one.
  function rememberConversation(id, title) {
    var shown = title || "Untitled conversation";
    if (conversationId) {
      if (title && String(id) === conversationId && heading.textContent !== title) setTitle(title);
      return;
    }
    conversationActions.hidden = false;
    conversationId = String(id);
    root.dataset.conversationId = conversationId;
    var url = root.dataset.conversationUrl + encodeURIComponent(conversationId) + "/";
    if (window.history && history.replaceState) history.replaceState(null, "", url);
    var placeholder = document.getElementById("no-conversations");
    if (placeholder) placeholder.remove();
    conversationList.hidden = false;
    conversationList.querySelectorAll("[aria-current]").forEach(function (a) { a.removeAttribute("aria-current"); });
    conversationList.prepend(el("li", { "data-conversation-id": conversationId }, el("a", { href: url, "aria-current": "page" },
      el("span", { class: "title", title: shown }, shown),
      el("span", { class: "meta" }, "just now"))));
    heading.textContent = shown;
    heading.title = shown;
  }

  // state: [name, text] kept on the message (stopped, failed), or null when it finished well.
  function finishAnswer(state, foot, below) {
    if (!current) return;
    answerText.set(current.article, current.text);
    if (current.frame) clearTimeout(current.frame);
    current.article.classList.remove("streaming");
    if (current.text) {
      renderInto(current.bubble, current.text, current.sources);
    } else {
      current.bubble.replaceChildren();
    }
    if (state) setState(current, state[0], state[1]);
    else { setState(current, null); liveState.textContent = "Answer complete."; }
    if (below) current.article.appendChild(below);
    if (foot) current.article.appendChild(foot);
    var finished = current;
    current = null;
    if (finished.text) addAnswerActions(finished.article);
    if (finished.replacing) {
      // A regenerated answer with text (done, or stopped after some) makes the one it
      // replaces a previous version; one without any, or cut off by an error, leaves it
      // current (as the server does: chat.agent's answer store).
      if (finished.text && !(state && state[0] === "failed")) makePrevious(finished.replacing);
      else { finished.replacing.hidden = false; markLastAnswer(finished.replacing); }
    }
    if (finished.text || !finished.replacing) markLastAnswer(finished.article);
    setBusy(false);
    scrollToEnd();
  }

  function footer(parts, title) {
    return el("div", { class: "message-foot", title: title || null }, parts.map(function (p) {
      return typeof p === "string" && p ? el("span", null, p) : p;
    }));
  }

  function setBalance(value) {
    var node = document.querySelector("#header-balance [data-balance]");
    if (node && typeof value === "number") node.textContent = value.toLocaleString("en-US");
  }

  // The header's "N left today": the principal's tightest budget after the answer (null: none).
  function setBudget(remaining, period) {
    var link = document.getElementById("header-budget");
    if (!link || typeof remaining !== "number") return;
    link.querySelector("[data-budget-left]").textContent = remaining.toLocaleString("en-US");
    // The words after the number say which budget is the tightest now.
    var words = link.lastChild;
    if (words && words.nodeType === Node.TEXT_NODE && (period === "day" || period === "month")) {
      words.textContent = period === "day" ? " left today" : " left this month";
    }
    link.classList.toggle("balance-low", remaining <= 0);
  }

  // ---------- Frames --------------------------------------------------------------------

  function onFrame(frame) {
    if (!frame || typeof frame.type !== "string") return;
    if (frame.type === "conversation.deleted") {
      conversationClosed(String(frame.conversation_id));
      return;
    }
    if (frame.type === "chat.error" && ignoreErrorOf && !current) {
      ignoreErrorOf = null;  // the turn of a conversation deleted meanwhile: nothing to say
      return;
    }
    if (frame.type === "chat.status") {
      // The model server is busy: the turn waits for it (its question's embedding, or the
      // answer's first token), and says so; read out when the step changes, not every notice.
      if (!current || frame.state !== "waiting") return;
      var announce = current.waitStep === frame.step ? liveState.textContent : frame.message;
      current.waitStep = frame.step;
      setState(current, "waiting", frame.message || "Waiting for the model server…", announce);
    } else if (frame.type === "chat.sources") {
      if (!current) return;
      current.gotSources = true;
      current.sourceList = frame.sources || [];
      current.sources = bySourceNumber(frame.sources);
      current.bubble.replaceChildren();
      rememberConversation(frame.conversation_id, frame.conversation_title);
      renderSources(current.sourceList, []);
      // route and query are newer fields: without them the turn reads as a search.
      current.general = frame.route === "general";
      var found = showFound(current, frame);
      var waiting = current.general && !current.sourceList.length ? "Thinking…" : "Writing the answer…";
      setState(current, "waiting", waiting, found + ". " + waiting);
      if (typeof frame.query === "string" && frame.query.trim() && !sameQuestion(frame.query, current.question)) {
        current.article.insertBefore(el("p", { class: "searched-for" }, "Searched for: ", el("q", null, frame.query.trim())),
          current.bubble);
      }
    } else if (frame.type === "chat.token") {
      if (!current) return;
      current.text += frame.text || "";
      if (current.state.dataset.state === "waiting") setState(current, "writing", "Writing…");
      renderCurrent();
    } else if (frame.type === "chat.done") {
      if (!current) return;
      var citations = frame.citations || [];
      renderSources(current.sourceList || [], citations);
      var used = frame.credits_charged;  // the answer's credits: its tokens at the model's price
      var tokens = frame.usage && frame.usage.total_tokens;
      var stopped = frame.status === "cancelled";
      var article = current.article;
      finishAnswer(stopped ? ["stopped", "Stopped"] : null, footer([used ? Groundwork.plural(used, "credit") : ""],
                   used && tokens && tokens !== used ? Groundwork.plural(tokens, "token") + " · " + Groundwork.plural(used, "credit")
                     + ": the answering model is priced other than 1 credit per token (Credits page, Prices)" : ""),
        answerSources(current.sourceList || [], citations));
      if (stopped && !messages.lastElementChild.querySelector(".bubble").textContent) {
        messages.lastElementChild.querySelector(".bubble").textContent = "(stopped before any text)";
      }
      // Thumbs up/down under the answer, above its credits line.
      if (frame.message_id && Groundwork.feedback) {
        article.insertBefore(Groundwork.feedback.forMessage(root.dataset.feedbackUrl, frame.message_id),
                             article.querySelector(".message-foot"));
      }
      setBalance(frame.credits_remaining);
      setBudget(frame.budget_remaining, frame.budget_period);
    } else if (frame.type === "chat.error") {
      var stored = Boolean(frame.question_id && frame.conversation_id);
      if (current && stored) {
        // The question is stored: it stays in the thread, its answer says it failed, with a
        // Retry that asks it again (no second copy of the question).
        rememberConversation(frame.conversation_id, "");
        var failedAnswer = current;
        finishAnswer(["failed", (current.text ? "The answer was cut off: " : "No answer was written: ") +
          (frame.message || frame.code || "error")], null);
        failedAnswer.article.classList.add("unanswered");
        failedAnswer.article.appendChild(el("div", { class: "actions mt-s" }, retryQuestionButton()));
      } else if (current && !current.gotSources) {
        // Nothing was stored: take the question back so it can be sent again.
        var pending = current;
        current = null;
        pending.article.remove();
        if (pending.userArticle) pending.userArticle.remove();
        if (pending.replacing) { pending.replacing.hidden = false; markLastAnswer(pending.replacing); }
        else if (!input.value) input.value = pending.question;
        liveState.textContent = "";  // the error itself is announced by #chat-status (role=alert)
        setBusy(false);
      } else if (current) {
        finishAnswer(["failed", (current.text ? "The answer was cut off: " : "No answer was written: ") +
          (frame.message || frame.code || "error")], null);
      }
      showError(frame.code, frame.message, stored);
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
        finishAnswer(["failed", current.text ? "The connection dropped: the answer was cut off." : "The connection dropped before an answer."]);
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
    regenerateButton.remove();
    var userArticle = addUserMessage(text);
    current = addAnswer();
    setState(current, "searching", "Searching your documents…");
    current.question = text;
    current.userArticle = userArticle;
    setBusy(true);
    var frame = { type: "chat.message", message: text };
    if (conversationId) frame.conversation_id = Number(conversationId);
    socket.send(JSON.stringify(frame));
    return true;
  }

  // ---------- Conversations: rename, delete, copy, regenerate ------------------------------

  var conversationActions = document.getElementById("conversation-actions");
  var renameForm = document.getElementById("rename-form");
  var renameInput = document.getElementById("rename-input");
  var renameButton = document.getElementById("rename-button");
  var deleteButton = document.getElementById("delete-button");
  var deleteDialog = document.getElementById("delete-dialog");
  var regenerateButton = el("button", { type: "button", class: "btn-small", id: "regenerate-button" }, "Regenerate");
  var ignoreErrorOf = null;

  function csrfToken() {
    var token = root.querySelector("input[name=csrfmiddlewaretoken]");
    return token ? token.value : "";
  }

  function conversationApi(method, body) {
    return fetch(root.dataset.conversationsApi + encodeURIComponent(conversationId) + "/", {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
      body: body ? JSON.stringify(body) : undefined
    }).then(function (response) {
      if (response.status === 204) return {};
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error((data.error && data.error.message) || "Not saved (" + response.status + ").");
        return data;
      });
    });
  }

  function sidebarItem(id) {
    return conversationList.querySelector('li[data-conversation-id="' + id + '"]');
  }

  function setTitle(title) {
    heading.textContent = title;
    heading.title = title;
    document.title = title + " · Groundwork";
    var item = sidebarItem(conversationId);
    var label = item && item.querySelector(".title");
    if (label) { label.textContent = title; label.title = title; }
  }

  function renameOpen() {
    renameInput.value = heading.textContent.trim();
    heading.hidden = true;
    conversationActions.hidden = true;
    renameForm.hidden = false;
    renameInput.focus();
    renameInput.select();
  }

  function renameClose() {
    renameForm.hidden = true;
    heading.hidden = false;
    conversationActions.hidden = !conversationId;
    renameButton.focus();
  }

  renameButton.addEventListener("click", renameOpen);
  document.getElementById("rename-cancel").addEventListener("click", renameClose);
  renameInput.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { event.preventDefault(); renameClose(); }
  });
  renameForm.addEventListener("submit", function (event) {
    event.preventDefault();
    var title = renameInput.value.trim();
    if (!title) { renameInput.focus(); return; }
    conversationApi("PATCH", { title: title }).then(function (data) {
      setTitle(data.title);
      clearStatus();
      liveState.textContent = "Renamed.";
      renameClose();
    }).catch(function (error) {
      showStatus("error", "Not renamed", error.message);
      renameInput.focus();
    });
  });

  deleteButton.addEventListener("click", function () {
    if (typeof deleteDialog.showModal === "function") deleteDialog.showModal();
    else if (window.confirm("Delete this conversation? Its questions and answers are deleted for good.")) deleteNow();
  });
  deleteDialog.addEventListener("close", function () {
    if (deleteDialog.returnValue === "delete") deleteNow(); else deleteButton.focus();
  });

  function deleteNow() {
    var id = conversationId;
    conversationApi("DELETE").then(function () {
      conversationClosed(id);
    }).catch(function (error) {
      showStatus("error", "Not deleted", error.message);
    });
  }

  // A conversation deleted here or in another tab (the socket's conversation.deleted): gone
  // from the list; if it is the open one, the page becomes a new conversation's and a turn
  // still being written in it is dropped (the server stops it).
  function conversationClosed(id) {
    var item = sidebarItem(id);
    if (item) item.remove();
    if (id !== conversationId) return;
    if (current) {
      if (current.frame) clearTimeout(current.frame);
      current = null;
      ignoreErrorOf = id;
      setBusy(false);
    }
    conversationId = null;
    root.dataset.conversationId = "";
    if (window.history && history.replaceState) history.replaceState(null, "", root.dataset.conversationUrl);
    messages.replaceChildren(el("div", { class: "empty", id: "chat-empty" },
      el("h3", null, "Conversation deleted"), el("p", null, "Ask a new question to start another.")));
    sourcesList.replaceChildren();
    sourcesEmpty.hidden = false;
    heading.textContent = "Ask your documents";
    heading.removeAttribute("title");
    conversationActions.hidden = true;
    renameForm.hidden = true;
    heading.hidden = false;
    lastQuestion = "";
    liveState.textContent = "The conversation was deleted.";
    showStatus("info", "Conversation deleted", "Its messages are gone; the credits it used stay on the credits page.");
    input.focus();
  }

  // What "Copy" puts on the clipboard: the answer's text, then the sources it cites, one a line.
  function copyText(article) {
    var text = (answerText.get(article) || "").trim();
    var cited = article.querySelectorAll(".cited-sources li");
    if (cited.length) {
      text += "\n\nSources:";
      cited.forEach(function (li) {
        var name = li.querySelector(".source-name");
        var where = li.querySelector(".where");
        text += "\n[" + li.dataset.n + "] " + (name ? name.textContent.trim() : "") +
          (where ? ", " + where.textContent.replace(/\s+/g, " ").trim() : "");
      });
    }
    return text;
  }

  // The clipboard API where the page is a secure context; elsewhere (plain http on a LAN
  // address) a selected, off-screen textarea and the copy command.
  function toClipboard(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = el("textarea", { readonly: true, class: "visually-hidden", "aria-hidden": "true" });
      area.value = text;
      document.body.appendChild(area);
      area.select();
      var copied = false;
      try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
      area.remove();
      if (copied) resolve(); else reject(new Error("copy refused"));
    });
  }

  function addAnswerActions(article) {
    if (article.querySelector(".answer-actions")) return;
    var copy = el("button", { type: "button", class: "btn-small copy-answer" }, "Copy");
    copy.addEventListener("click", function () {
      toClipboard(copyText(article)).then(function () {
        copy.textContent = "Copied";
        liveState.textContent = "Answer copied.";
        setTimeout(function () { copy.textContent = "Copy"; }, 1500);
      }, function () {
        copy.textContent = "Copy failed: select the text instead";
      });
    });
    var actions = el("div", { class: "answer-actions" }, copy);
    var foot = article.querySelector(".message-foot");
    if (foot) foot.parentNode.insertBefore(actions, foot.nextSibling); else article.appendChild(actions);
    if (article.hasAttribute("data-last-answer")) markLastAnswer(article);
  }

  // "Regenerate" sits on the current answer to the conversation's last question.
  function markLastAnswer(article) {
    messages.querySelectorAll("[data-last-answer]").forEach(function (a) { a.removeAttribute("data-last-answer"); });
    article.setAttribute("data-last-answer", "");
    var actions = article.querySelector(".answer-actions");
    if (actions) actions.appendChild(regenerateButton); else regenerateButton.remove();
  }

  // The answer a regenerated one replaces stays readable, folded, above the new one.
  function makePrevious(article) {
    article.hidden = false;
    article.removeAttribute("data-last-answer");
    article.classList.add("previous-version");
    var details = el("details", { class: "version" }, el("summary", null, "Previous version of the answer below"));
    Array.prototype.slice.call(article.children).forEach(function (child) {
      if (!child.classList.contains("who")) details.appendChild(child);
    });
    article.appendChild(details);
  }

  regenerateButton.addEventListener("click", function () {
    if (!socket || socket.readyState !== WebSocket.OPEN || current || !conversationId) return;
    var replacing = regenerateButton.closest("article");
    clearStatus();
    regenerateButton.remove();
    replacing.hidden = true;  // shown again as a previous version, or as it was if this fails
    current = addAnswer();
    current.replacing = replacing;
    current.question = lastQuestionOf(replacing);
    setState(current, "searching", "Asking again: searching your documents…");
    setBusy(true);
    socket.send(JSON.stringify({ type: "chat.regenerate", conversation_id: Number(conversationId) }));
  });

  function lastQuestionOf(article) {
    for (var node = article.previousElementSibling; node; node = node.previousElementSibling) {
      if (node.classList.contains("user")) return node.querySelector(".bubble").textContent;
    }
    return "";
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

  // A stored question left without an answer (the page loaded after its turn failed).
  messages.querySelectorAll(".retry-question").forEach(function (b) { b.addEventListener("click", retryQuestion); });

  // The stored answers get their Copy (and the last its Regenerate) once those are defined.
  messages.querySelectorAll(".message.assistant[data-message-id]").forEach(addAnswerActions);
  updateSendable();
  connect();
})();
