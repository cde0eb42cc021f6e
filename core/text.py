"""Text a person gives the product as a name (a team, a person, an API key, a collection).

A name is shown in pages, emails and exports: a line break in it splits an email's subject
so that the text after it becomes the body's first line, and bidirectional overrides make it
read as something else. Names with control characters are refused at input."""
from __future__ import annotations

import re

# C0 and C1 controls (line breaks and tabs included), DEL, zero-width characters, the line
# and paragraph separators, and the bidirectional embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")

CONTROL_CHARACTERS_MESSAGE = ("A name cannot contain line breaks, tabs or other control characters; type it on one "
                              "line.")


def has_control_characters(text: str | None) -> bool:
    return bool(text) and _CONTROL.search(text) is not None
