"""A chat turn ready to be answered (`ChatTurn`, made by chat.agent.turn_prepare) and its
answer's stream; how a turn uses the chat model (`Profile`) and what an API caller may
set for one (`TurnOptions`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from accounts.models import ApiKey, User
from billing.models import CreditHold
from billing.services import HoldDraw
from chat import answering
from chat.models import Conversation, Message
from documents.tags import tags_filter
from llm import client as llm
from retrieval.search import Passage

NOTHING_TO_QUOTE = "The documents I found don't answer this directly; the passages I searched are listed below."


@dataclass(frozen=True)
class Profile:
    """How a turn uses the chat model (settings.CHAT_PROFILE; measured in bench/answer_eval.py)."""

    name: str
    passages: int | None  # how many passages the model reads (None: all, each with its neighbours)
    max_tokens: int | None  # the answer budget (None: CHAT_MAX_TOKENS)
    strict: bool  # every sentence checked against the passages and cited by overlap
    sampling: dict  # decoding settings sent with the request
    rewrite: bool  # follow-ups rewritten into standalone questions by the model
    max_sentences: int = 0  # a longer answer is stopped there (0: only the token budget)
    prompt: str = "default"  # chat/prompt.py's wording of the question and chunks ("own_words")
    # The model reads each passage cut to its sentences nearest the question, this many words
    # in all (answering.focused; None: whole passages), and earlier turns within this many
    # tokens (None: CHAT_HISTORY_TOKENS): a small local model's first token within its budget.
    prompt_words: int | None = None
    history_tokens: int | None = None


PROFILES = {
    # SmolLM2-135M: three single chunks, a short budget, at most five sentences (it rambles to
    # any cap) and penalties against its loops.
    "small": Profile(
        "small",
        passages=3,
        max_tokens=200,
        strict=True,
        rewrite=False,
        max_sentences=5,
        sampling={"frequency_penalty": 0.3, "repeat_penalty": 1.15, "dry_multiplier": 0.8},
    ),
    # Qwen2.5-Coder-0.5B/1.5B (the bundled default): it answers in its own words, so its sentences
    # are checked against the passages (strict) but it may say more; a mild repeat penalty
    # only (penalties made it drop the citations); no model rewrite of follow-ups (it answered
    # the rewrite request instead). Measured in bench/chat_models.py.
    "medium": Profile(
        "medium",
        passages=3,
        max_tokens=300,
        strict=True,
        rewrite=False,
        max_sentences=6,
        sampling={"repeat_penalty": 1.05, "top_k": 40, "min_p": 0.05},
        prompt="own_words",
        prompt_words=240,
        history_tokens=300,
    ),
    "capable": Profile("capable", passages=None, max_tokens=None, strict=False, rewrite=True, sampling={}),
}


def profile() -> Profile:
    """CHAT_PROFILE, else the bundled model's own profile (llm/bundled_models.py: small for
    SmolLM2, medium for Qwen), else capable (LOCAL_CHAT_MODEL_PATH or a provider)."""
    from llm import bundled_models

    bundled = settings.LLM_BUNDLED and not settings.LOCAL_CHAT_MODEL_PATH
    name = settings.CHAT_PROFILE or (bundled_models.model(settings.LOCAL_CHAT_MODEL).profile if bundled else "capable")
    return PROFILES.get(name, PROFILES["capable"])


def general_answers(chosen: Profile) -> bool:
    """Whether the chat model may answer what the documents do not cover from its own
    knowledge: settings.CHAT_GENERAL_ANSWERS, or unset, a provider's model on the capable
    profile (the bundled small models made up "The capital city of Australia is Sydney")."""
    if settings.CHAT_GENERAL_ANSWERS is not None:
        return settings.CHAT_GENERAL_ANSWERS
    return not settings.LLM_BUNDLED and chosen.name == "capable"


@dataclass(frozen=True)
class TurnOptions:
    """What an API caller may set for one turn, always within the server's bounds."""

    max_tokens: int | None = None  # at most CHAT_MAX_TOKENS
    temperature: float | None = None  # clamped to 0..CHAT_TEMPERATURE_MAX
    system: str = ""  # the caller's instructions, merged below the grounding rules
    end_user: str = ""  # the caller's end-user id (OpenAI `user`), stored on the question
    # A collection id or a list of them to narrow retrieval to (None: all visible).
    collection: int | str | list[int | str] | None = None
    # Only documents carrying any of `tags`; none carrying any of `exclude_tags` (the
    # account's excluded tags apply whatever is asked): documents/tags.py's rules.
    tags: list[str] | None = None
    exclude_tags: list[str] | None = None

    def tags_checked(self) -> TurnOptions:
        """These options with their tags checked (TagsInvalid, a 400 / chat.error
        `invalid_tags`, before anything is held) and lower-cased as retrieval compares them."""
        return dataclasses.replace(
            self,
            tags=tags_filter(self.tags, field="tags"),
            exclude_tags=tags_filter(self.exclude_tags, field="exclude_tags"),
        )

    def bounded_max_tokens(self, default: int | None = None) -> int:
        cap = settings.CHAT_MAX_TOKENS
        if self.max_tokens is None:
            return min(default or cap, cap)
        return max(1, min(int(self.max_tokens), cap))

    def bounded_temperature(self, default: float) -> float:
        if self.temperature is None:
            return default
        return max(0.0, min(float(self.temperature), settings.CHAT_TEMPERATURE_MAX))


# Whose budgets a turn spends: {"user": …, "api_key": …}, the key on key surfaces.
Spender = dict[str, "User | AnonymousUser | ApiKey | None"]


@dataclass
class ChatTurn:
    """A question ready to be answered: what the model reads, and what the answer is
    settled and stored with."""

    account_id: int
    conversation: Conversation
    user_message: Message
    request_id: str
    route: str
    profile: Profile
    cancelled: threading.Event
    spender: Spender
    passages: list[Passage] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # what the model is sent (chat.prompt)
    temperature: float = 0.0
    hold: CreditHold | None = None  # None: small talk, neither held nor charged
    max_tokens: int = 512
    query: str = ""  # what was searched ("" when nothing was)
    reply: str = ""  # small talk: the whole answer, without a model
    note: str = ""  # said before the model's answer (a general answer's "not from your documents")
    finish_reason: str = ""
    answered_by: str = ""  # "reply" (small talk), "model", or "passages" (the extractive answer)
    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    answer_parts: list[str] = field(default_factory=list)
    llm_stream: llm.ChatStream | None = None
    # What the turn spent in its hold's name before the answer (the follow-up rewrite, the
    # query embedding): recorded when the hold is settled or released (billing.HoldDraw).
    draws: list[HoldDraw] = field(default_factory=list)
    regenerates: bool = False  # the stored question asked again (chat.agent's regenerate)

    @property
    def answer(self) -> str:
        return "".join(self.answer_parts)

    def _emit(self, text: str) -> str:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.answer_parts.append(text)
        return text

    def stream(self) -> Iterator[str]:
        """Yield the answer's text as it is written. The model's answer passes a guard a
        sentence at a time (no loops; with a strict profile, nothing the passages do not
        say); when none of it passes, the passages' own best sentences answer instead.
        A turn cancelled before this point never calls the model."""
        if self.reply:
            self.finish_reason, self.answered_by = "stop", "reply"
            yield self._emit(self.reply)
            return
        if self.cancelled.is_set():
            return
        if self.note:
            yield self._emit(self.note)
        guard = answering.Guard(
            self.passages,
            strict=self.profile.strict and bool(self.passages),
            loop_words=4 if self.profile.strict else 8,
            by_sentence=self.profile.strict,
            max_sentences=self.profile.max_sentences,
            question=self.user_message.content,
        )
        yield from self._model_answer(guard)
        if self.passages and not self.cancelled.is_set():
            yield from self._passages_answer(guard)

    def _model_answer(self, guard: answering.Guard) -> Iterator[str]:
        """The model's streamed answer, as far as the guard lets it through."""
        self.llm_stream = llm.chat(
            self.messages,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            cancelled=self.cancelled,
            sampling=self.profile.sampling or None,
        )
        tokens = iter(self.llm_stream)
        try:
            for text in tokens:
                released = guard.feed(text)
                if released:
                    yield self._emit(released)
                if guard.stopped:
                    break
            else:
                tail = guard.flush()
                if tail:
                    yield self._emit(tail)
        finally:
            tokens.close()  # a guard's stop ends the provider's generation too
        self.finish_reason = "stop" if guard.stopped else (self.llm_stream.finish_reason or "stop")
        self.answered_by = "model"

    def _passages_answer(self, guard: answering.Guard) -> Iterator[str]:
        """The passages' own sentences where the model's answer did not hold: all of the
        answer when none of it passed, the rest of it after a lone first sentence.

        The question's own words pick the sentences: a follow-up was searched together
        with the question before it, but asks something else (0.95 of the two-turn set
        quoted the answer this way, 0.65 with the search query)."""
        question = self.user_message.content
        if not guard.answered:
            self.answered_by = "passages"
            quoted = False
            for piece in answering.extractive_sentences(question, self.passages):
                quoted = True
                yield self._emit(piece)  # a sentence at a time, each as it is chosen
            if not quoted:
                yield self._emit(NOTHING_TO_QUOTE)
        elif guard.stopped in ("unsupported", "wrong_script", "off_topic") and len(guard.released) == 1:
            # The model's first sentence held and its second did not: one sentence rarely
            # answers ("You can tell incomplete input from invalid input."), so the sentences of
            # the passage it cites say the rest, without what it already said.
            cited = answering.CITATION.search(self.answer)
            rest = answering.extractive_sentences(
                question, self.passages, said=self.answer, within=int(cited.group(1)) if cited else None
            )
            for n, piece in enumerate(rest):
                self.answered_by = "model+passages"
                gap = "" if n or self.answer.endswith((" ", "\n")) else " "
                yield self._emit(gap + piece)
