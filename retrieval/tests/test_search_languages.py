"""Full text in each document's language: a document's language is
detected at ingestion, its chunks are indexed with the matching PostgreSQL configuration
(`simple` when unknown), and a query matches each chunk under its own configuration, with
the GIN index still serving it; documents ingested before that are backfilled."""

import numpy as np
import pytest
from django.db import connection

from core.tenancy import account_context
from documents.fulltext import document_languages_backfill
from documents.language import language_detect, search_config_for
from documents.models import Chunk, Document
from retrieval.search import hybrid_search

GERMAN = (
    "Reisekostenrichtlinie. Alle Abrechnungen sind innerhalb von vier Wochen nach dem Ende der Reise über "
    "das Reiseportal einzureichen. Die Belege müssen im Original oder als lesbarer Scan beigefügt werden. "
    "Verspätet eingereichte Unterlagen werden nur mit einer schriftlichen Begründung bearbeitet, und die "
    "Erstattung erfolgt mit der nächsten Gehaltsabrechnung des Mitarbeiters."
).encode()
ENGLISH = (
    b"Installing packages. Packages are installed with the package manager, which downloads each "
    b"requested library together with the libraries it depends on and records the installed versions "
    b"so that the same environment can be rebuilt later on another machine by the whole team."
)


def _fulltext(account, query: str) -> list[int]:
    with account_context(account):
        hits = hybrid_search(account=account, query=query, query_vector=np.zeros(384), mode="fulltext")
    return [h.document_id for h in hits]


@pytest.fixture
def library(fake_llm, account_a, upload_and_ingest):
    german = upload_and_ingest(account_a, "reisekosten.txt", GERMAN)
    english = upload_and_ingest(account_a, "packages.txt", ENGLISH)
    return german, english


def test_languages_are_detected_and_mapped():
    assert language_detect(GERMAN.decode()) == "de" and language_detect(ENGLISH.decode()) == "en"
    assert language_detect("x = 1") == ""  # too short to tell
    assert search_config_for("de") == "german" and search_config_for("es") == "spanish"
    assert search_config_for("") == search_config_for("zu") == "simple"  # unknown or unsupported


def test_a_german_document_is_found_by_a_german_query_that_needs_stemming(library, account_a):
    german, english = library
    assert (german.language, german.search_config) == ("de", "german")
    assert (english.language, english.search_config) == ("en", "english")
    # "Abrechnung" (singular) only meets "Abrechnungen" under the German stemmer ('abrechn').
    assert _fulltext(account_a, "Abrechnung") == [german.pk]
    assert _fulltext(account_a, "Beleg einreichen") == [german.pk]
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_tsvector('english', 'Abrechnungen') @@ websearch_to_tsquery('english', 'Abrechnung')")
        assert cursor.fetchone()[0] is False  # what the English-only index missed


def test_an_english_document_is_found_as_before(library, account_a):
    german, english = library
    assert _fulltext(account_a, "install a package") == [english.pk]
    assert _fulltext(account_a, "libraries depending") == [english.pk]


def test_an_undetectable_document_is_indexed_simple(fake_llm, account_a, upload_and_ingest):
    document = upload_and_ingest(account_a, "codes.txt", b"XK-42 ZZ-9 QQ-7")
    assert (document.language, document.search_config) == ("", "simple")
    assert _fulltext(account_a, "ZZ-9") == [document.pk]


def test_another_account_finds_nothing_of_it(library, account_a, account_b, upload_and_ingest):
    theirs = upload_and_ingest(account_b, "reise.txt", GERMAN)
    german, _english = library
    assert _fulltext(account_b, "Abrechnung") == [theirs.pk]
    assert german.pk not in _fulltext(account_b, "Abrechnung")


def test_documents_ingested_before_languages_are_backfilled(library, account_a):
    german, english = library
    # As migration 0015 left a document ingested before it (under RLS: in the account's context).
    with account_context(account_a), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE documents_document SET language = '', search_config = 'english' WHERE id IN (%s, %s)",
            [german.pk, english.pk],
        )
        cursor.execute(
            "UPDATE documents_chunk SET search_config = 'english' WHERE document_id IN (%s, %s)",
            [german.pk, english.pk],
        )
    assert _fulltext(account_a, "Abrechnung") == []  # searched as before: English only
    assert document_languages_backfill() == 2
    assert document_languages_backfill() == 0  # done once
    with account_context(account_a):
        assert dict(Document.objects.for_account(account_a).values_list("pk", "search_config")) == {
            german.pk: "german",
            english.pk: "english",
        }
        assert set(
            Chunk.objects.for_account(account_a).filter(document=german).values_list("search_config", flat=True)
        ) == {"german"}
    assert _fulltext(account_a, "Abrechnung") == [german.pk]
    assert _fulltext(account_a, "install a package") == [english.pk]


def test_the_gin_index_serves_the_query_under_every_configuration(library, account_a):
    """The function ORs the query under each configuration into one constant tsquery: the
    GIN index answers it. Planned as the function runs it, without RLS (it is SECURITY
    DEFINER, owned by a BYPASSRLS role), as that role; seq scans off because
    the test's table is too small to prefer an index."""
    from core.db_owner import owner_connection

    with owner_connection() as conn:
        conn.execute("SET ROLE groundwork_search")  # the function's owner (BYPASSRLS)
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT id FROM documents_chunk WHERE search_vector @@ (websearch_to_tsquery('english',"
                " 'Abrechnung') || websearch_to_tsquery('german', 'Abrechnung'))"
            ).fetchall()
        )
    assert "Bitmap Index Scan on chunk_search_gin" in plan, plan
