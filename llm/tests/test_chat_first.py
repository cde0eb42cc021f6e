"""The local model server answers a question before the next slice of an embedding request:
chat and embeddings share the same cores (llm/local_server.py ChatFirst). Plain functions: no
models are loaded; the embedder records what it was asked."""

import threading
import time

from llm.local_server import EMBEDDING_SLICE, ChatFirst, LocalModelsBackend


class RecordingEmbedder:
    def __init__(self, events: list, on_slice=None):
        self.events, self.on_slice, self.slices = events, on_slice, []

    def embed(self, texts):
        self.slices.append(list(texts))
        self.events.append(("slice", len(self.slices)))
        if self.on_slice:
            self.on_slice(len(self.slices))
        return [[float(len(t))] for t in texts], sum(len(t.split()) for t in texts)


def _backend() -> LocalModelsBackend:
    return LocalModelsBackend("/nowhere/model.gguf", threads=1, gen_threads=1, ctx_size=512, max_tokens=8)


def test_no_chat_in_flight_means_no_wait():
    gate = ChatFirst()
    assert gate.embedding_turn(time.monotonic() + 60) is True


def test_an_embedding_slice_waits_for_the_chat_in_flight():
    gate, events = ChatFirst(), []
    answering, asked = threading.Event(), threading.Event()

    def chat():
        with gate.chat():
            answering.set()
            asked.wait(10)
            events.append("chat answered")

    thread = threading.Thread(target=chat)
    thread.start()
    answering.wait(10)

    def embed():
        gate.embedding_turn(time.monotonic() + 60)
        events.append("slice")

    embedding = threading.Thread(target=embed)
    embedding.start()
    embedding.join(0.3)
    assert embedding.is_alive() and events == []  # held back while the chat is answered
    asked.set()
    thread.join(10)
    embedding.join(10)
    assert events == ["chat answered", "slice"]


def test_the_wait_is_bounded():
    gate = ChatFirst()
    with gate.chat():
        assert gate.embedding_turn(time.monotonic() + 0.05) is False  # a chat never ends: go on


def test_a_request_is_embedded_in_slices_of_like_length_and_answered_in_order():
    backend, events = _backend(), []
    embedder = RecordingEmbedder(events)
    texts = [("word " * (n % 37 + 1)).strip() + f" {n}" for n in range(50)]
    vectors, tokens = backend.embed_chat_first(embedder, texts)
    assert [v[0] for v in vectors] == [float(len(t)) for t in texts]  # the order asked
    assert tokens == sum(len(t.split()) for t in texts)
    assert [len(s) for s in embedder.slices] == [16, 16, 16, 2] and EMBEDDING_SLICE == 16
    lengths = [len(t) for s in embedder.slices for t in s]
    assert lengths == sorted(lengths)  # each slice pads to its longest: like with like


def test_a_question_asked_during_an_embedding_request_goes_before_its_next_slice():
    backend, events = _backend(), []
    released = threading.Event()
    chat_thread = None

    def ask_during_first_slice(number):
        nonlocal chat_thread
        if number != 1:
            return
        entered = threading.Event()

        def chat():
            with backend.chat_first.chat():
                entered.set()
                released.wait(10)
                events.append("chat answered")

        chat_thread = threading.Thread(target=chat)
        chat_thread.start()
        entered.wait(10)
        threading.Timer(0.2, released.set).start()

    embedder = RecordingEmbedder(events, on_slice=ask_during_first_slice)
    backend.embed_chat_first(embedder, [f"text {n}" for n in range(40)])
    chat_thread.join(10)
    assert events == [("slice", 1), "chat answered", ("slice", 2), ("slice", 3)]


def test_a_questions_embedding_goes_before_the_next_slice_of_a_documents_batch():
    """The search of a question asked while a document is indexed: its one-text embedding is
    marked like a chat request, so the batch's next slice waits until it is embedded."""
    backend, events = _backend(), []
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    class Embedder(RecordingEmbedder):
        def embed(self, texts):
            if len(texts) == 1:
                events.append("query started")
                started.set()
                release.wait(10)
                events.append("query embedded")
                return [[1.0]], 1
            return super().embed(texts)

    def ask_during_first_slice(number):
        if number == 1:
            threading.Thread(target=lambda: (query(), done.set())).start()
            started.wait(10)
            threading.Timer(0.3, release.set).start()

    embedder = Embedder(events, on_slice=ask_during_first_slice)
    backend.embedder = embedder

    def query():
        backend.embeddings({"model": "all-minilm-l6-v2"}, ["query: who approves leave?"])

    backend.embed_chat_first(embedder, [f"passage: text {n}" for n in range(40)])
    done.wait(10)
    assert events[:4] == [("slice", 1), "query started", "query embedded", ("slice", 2)], events
