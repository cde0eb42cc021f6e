"""Server-sent events for the REST surfaces: one generator that runs a whole turn and yields
its events, shared by `POST /api/v1/chat/?stream=1` and the OpenAI-compatible endpoint."""
from __future__ import annotations

import json
import logging

from chat.agent import ChatTurn, turn_finish
from chat.errors import ChatError
from core.errors import as_groundwork_error

logger = logging.getLogger("groundwork.chat")


def sse(data) -> str:
    return f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n"


def run_turn(turn: ChatTurn):
    """Yield ("token", text)…, then ("done", result) or ("error", ChatError). The turn is
    always settled, even when the client goes away mid-stream (GeneratorExit)."""
    failed = None
    try:
        for text in turn.stream():
            yield "token", text
    except GeneratorExit:
        turn.cancelled.set()
        turn_finish(turn)
        raise
    except Exception as exc:
        failed = exc
    result = turn_finish(turn, failed=failed)
    if failed is not None:
        mapped = as_groundwork_error(failed)
        yield "error", mapped
        return
    yield "done", result
