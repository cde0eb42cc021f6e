"""A document's name as pages show it: a line may break after each separator of a file name
(- _ . / \\), so "price-list-2026.xlsx" wraps as "price-list-" / "2026.xlsx", never inside a
part ("…2026.xls" / "x"). static/js/app.js's Groundwork.nameWithBreaks does the same for the
rows a page adds itself."""

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()

_SEPARATOR = re.compile(r"([-_./\\])")


@register.filter
def name_breaks(name) -> str:
    """The name, HTML-escaped, with <wbr> (a line-break opportunity) after each separator."""
    return mark_safe(
        "".join(
            escape(part) + ("<wbr>" if _SEPARATOR.fullmatch(part) else "")
            for part in _SEPARATOR.split(str(name))
            if part
        )
    )
