// Thumbs up/down and an optional comment under an answer (POST /api/v1/messages/{id}/feedback/,
// docs/guide/chat.md, "Feedback"): Groundwork.feedback.attach(container) fills a `.feedback` element whose
// data-feedback-url names the answer's endpoint, data-rating and data-comment what this person
// said before (a reopened conversation shows it). A click saves the rating at once; the comment
// box then offers to say more, and sending it replaces the first (one per person and answer).
// Needs app.js (Groundwork.el). Every text goes in as text (Groundwork.el), none as markup.
(function () {
  "use strict";
  var el = Groundwork.el;
  var LABELS = { up: "Helpful", down: "Not helpful" };

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function send(url, body) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body)
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error((data.error && data.error.message) || "Not saved (" + response.status + ").");
        return data;
      });
    });
  }

  function attach(box) {
    if (!box || box.dataset.ready) return;
    box.dataset.ready = "1";
    var rating = box.dataset.rating || "";
    var said = el("span", { class: "feedback-said", role: "status" });
    var buttons = {};
    ["up", "down"].forEach(function (value) {
      buttons[value] = el("button", { type: "button", class: "btn-small", "data-rating": value,
                                      "aria-pressed": rating === value ? "true" : "false" },
                          el("span", { class: "thumb thumb-" + value, "aria-hidden": "true" }), LABELS[value]);
      buttons[value].addEventListener("click", function () { rate(value); });
    });
    var comment = el("textarea", { name: "comment", rows: 2, maxlength: 2000,
                                   "aria-label": "Comment on this answer (optional)",
                                   placeholder: "What was wrong or missing? (optional)" });
    comment.value = box.dataset.comment || "";
    var form = el("form", { class: "feedback-comment-form" }, comment,
                  el("button", { type: "submit", class: "btn-small" }, "Send comment"));
    form.hidden = !rating;
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      save({ rating: rating, comment: comment.value }, "Thanks: your comment was saved.");
    });
    box.replaceChildren(el("span", { class: "muted" }, "Was this answer helpful?"), buttons.up, buttons.down, said, form);

    function save(body, thanks) {
      said.textContent = "Saving…";
      return send(box.dataset.feedbackUrl, body).then(function () { said.textContent = thanks; },
        function (error) { said.textContent = error.message; });
    }

    function rate(value) {
      rating = value;
      Object.keys(buttons).forEach(function (k) { buttons[k].setAttribute("aria-pressed", k === value ? "true" : "false"); });
      form.hidden = false;
      save({ rating: value, comment: comment.value }, "Thanks: saved as “" + LABELS[value] + "”.");
    }
  }

  // A new answer's box, once its message id is known (chat.done).
  function forMessage(baseUrl, messageId) {
    var box = el("div", { class: "feedback", "data-feedback-url": baseUrl + encodeURIComponent(messageId) + "/feedback/" });
    attach(box);
    return box;
  }

  document.querySelectorAll(".feedback[data-feedback-url]").forEach(attach);
  Groundwork.feedback = { attach: attach, forMessage: forMessage };
})();
