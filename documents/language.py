"""A document's language, and the PostgreSQL text-search configuration its chunks are
indexed and searched with.

Detected once per revision at ingestion from the start of its text with py3langid (langid's
maintained fork: offline, a model of ~2.5 MB inside the wheel, numpy only). A language
PostgreSQL has no snowball configuration for, or text too short or too mixed to tell,
gets `simple` (lower-cased words, no stemming, no stop words), never the wrong stemmer.
"""

from __future__ import annotations

import functools

SIMPLE = "simple"
# Enough text to tell a language reliably; more only costs time.
SAMPLE_CHARS = 20_000
MIN_CHARS = 200
# ISO 639-1 -> the configuration PostgreSQL 16+ ships for it (`\dF` in psql).
CONFIGS = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "nb": "norwegian",
    "nn": "norwegian",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
    "yi": "yiddish",
}
# langid's normalised probability under which the guess is not trusted.
MIN_CONFIDENCE = 0.9


@functools.lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_pickled_model(MODEL_FILE, norm_probs=True)


def language_detect(text: str) -> str:
    """The ISO 639-1 code of `text`'s language, or "" when it cannot be told."""
    sample = text[:SAMPLE_CHARS]
    if len(sample.strip()) < MIN_CHARS:
        return ""
    code, probability = _identifier().classify(sample)
    return str(code) if float(probability) >= MIN_CONFIDENCE else ""


def search_config_for(language: str) -> str:
    """The text-search configuration for an ISO 639-1 code ("" or unsupported: simple)."""
    return CONFIGS.get((language or "").lower(), SIMPLE)
