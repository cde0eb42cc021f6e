"""Text a person gives the product as a name (a team, a person, an API key, a collection).

A name is shown in pages, emails and exports: a line break in it splits an email's subject
so that the text after it becomes the body's first line, and bidirectional overrides make it
read as something else. Names with control characters are refused at input."""

from __future__ import annotations

import re

# C0 and C1 controls (line breaks and tabs included), DEL, zero-width characters, the line
# and paragraph separators, and the bidirectional embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")

CONTROL_CHARACTERS_MESSAGE = "A name cannot contain line breaks, tabs or other control characters; type it on one line."


def has_control_characters(text: str | None) -> bool:
    return bool(text) and _CONTROL.search(text) is not None


# Free text a person writes (a comment): line breaks and tabs are its own; the rest are not.
_CONTROL_IN_PROSE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def has_control_characters_in_prose(text: str | None) -> bool:
    """Like has_control_characters, for text of several lines: line feeds and tabs are allowed
    (a carriage return is not: normalise "\\r\\n" to "\\n" first)."""
    return bool(text) and _CONTROL_IN_PROSE.search(text) is not None


# Digits a person may group with: "5,000", "5 000", "5_000", "5 000" (narrow no-break space).
_GROUPING = str.maketrans("", "", ", _\u202f\u00a0")
# More digits than any amount of credits has: int() of 5,000 digits raises, and slowly.
_MAX_DIGITS = 19


def whole_number(value, *, minimum: int, maximum: int) -> int | None:
    """A whole number from `minimum` to `maximum` typed or sent as `value` ("5,000" is 5000),
    or None when it is not one: not decimal digits ("²", "½", "1e3", "-5", true), too long
    or out of range. Callers turn None into their own error with the field's words."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip().translate(_GROUPING)
        if not text.isdecimal() or len(text) > _MAX_DIGITS:
            return None
        number = int(text)
    return number if minimum <= number <= maximum else None
