"""A person's data export: what it holds, what it never holds, its limits,
who may fetch it and for how long. Real PostgreSQL (RLS on), real Redis queue, real storage."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import zipfile

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from accounts.models import Role
from accounts.services import account_delete
from accounts.tests.factories import add_member, make_account, make_api_key, make_user
from chat.models import Conversation, Message
from core.tenancy import account_context, user_context
from documents.models import EmbeddingBatch
from documents.services import collection_create, collection_update, document_move, document_upload
from exports.jobs import cleanup_exports
from exports.models import DataExport, ExportStatus

# --- the world: a person in two accounts, a colleague, a stranger ----------------------------


@pytest.fixture
def world(account_a, account_b, fake_llm, run_jobs, django_capture_on_commit_callbacks):
    person = add_member(account_a, make_user("person@acme.test"), role=Role.MEMBER)
    colleague = add_member(account_a, make_user("colleague@acme.test"), role=Role.MEMBER)
    side = make_account("Side project", owner_email="founder@side.test")
    add_member(side, person, role=Role.VIEWER)

    def upload(account, user, name, text):
        with account_context(account, user=user), django_capture_on_commit_callbacks(execute=True):
            document, _ = document_upload(
                account=account, actor=user, upload=SimpleUploadedFile(name, text.encode(), content_type="text/plain")
            )
        return document

    mine = upload(account_a, person, "person-notes.txt", "PERSONMARKER the roadmap of the person.")
    theirs = upload(account_a, colleague, "colleague-notes.txt", "COLLEAGUEMARKER the colleague's secrets.")
    stranger = upload(account_b, account_b.test_owner, "beta-plan.txt", "BETAMARKER another account's plan.")
    run_jobs()
    with account_context(account_a):
        for user, marker in ((person, "PERSONCHAT"), (colleague, "COLLEAGUECHAT")):
            conversation = Conversation.objects.for_account(account_a).create(
                account=account_a, user=user, title=f"{marker} title"
            )
            Message.objects.for_account(account_a).create(
                account=account_a, conversation=conversation, role="user", content=f"{marker} question"
            )
            Message.objects.for_account(account_a).create(
                account=account_a,
                conversation=conversation,
                role="assistant",
                content=f"{marker} answer [Document 1]",
                citations=[{"n": 1, "document_id": mine.pk, "document": mine.name, "chunk_ids": [1]}],
            )
    return dict(person=person, colleague=colleague, side=side, mine=mine, theirs=theirs, stranger=stranger)


def _login(client, user):
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def _commit_hooks(django_capture_on_commit_callbacks, monkeypatch):
    """The test runs in one transaction: what a request leaves for on-commit (enqueueing the
    export's job) runs when the request returns, as it would after its real commit."""
    from django.test import Client

    request = Client.request

    def request_then_commit(self, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return request(self, **kwargs)

    monkeypatch.setattr(Client, "request", request_then_commit)


def _export(client, run_jobs) -> dict:
    created = client.post("/api/v1/exports/")
    assert created.status_code == 202, created.content
    assert set(created.json()) == {"id", "status"} and created.json()["status"] == "pending"
    run_jobs()
    status = client.get(f"/api/v1/exports/{created.json()['id']}/")
    assert status.status_code == 200
    return status.json()


def _zip(client, url) -> zipfile.ZipFile:
    response = client.get(url)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def _all_text(archive: zipfile.ZipFile) -> str:
    return "\n".join(archive.read(name).decode("utf-8", "replace") for name in archive.namelist())


def _folder(archive, account) -> str:
    manifest = json.loads(archive.read("export.json"))
    return next(a["folder"] for a in manifest["accounts"] if a["id"] == account.pk)


# --- what it holds --------------------------------------------------------------------------


def test_export_holds_the_persons_data_in_every_account_and_nobody_elses(world, account_a, client, run_jobs):
    body = _export(_login(client, world["person"]), run_jobs)
    assert body["status"] == "ready" and body["error"] is None and body["download_url"]
    archive = _zip(client, body["download_url"])
    manifest = json.loads(archive.read("export.json"))
    assert manifest["person"]["email"] == "person@acme.test"
    assert {(a["id"], a["role"]) for a in manifest["accounts"]} == {
        (account_a.pk, "member"),
        (world["side"].pk, "viewer"),
    }
    folder = _folder(archive, account_a)
    documents = json.loads(archive.read(f"{folder}/documents.json"))
    assert [d["id"] for d in documents] == [world["mine"].pk]
    assert documents[0]["chunks"] and "PERSONMARKER" in documents[0]["chunks"][0]["content"]
    assert archive.read(documents[0]["file"]) == b"PERSONMARKER the roadmap of the person."
    conversations = json.loads(archive.read(f"{folder}/conversations.json"))
    assert [c["title"] for c in conversations] == ["PERSONCHAT title"]
    assert conversations[0]["messages"][1]["citations"][0]["document_id"] == world["mine"].pk
    usage = json.loads(archive.read(f"{folder}/usage.json"))
    assert usage and all(e["delta"] < 0 for e in usage)
    assert any(e["reference"].startswith(f"document:{world['mine'].pk}") for e in usage), usage
    # Another member's and another account's data are nowhere in it.
    text = _all_text(archive)
    assert "PERSONMARKER" in text and "PERSONCHAT" in text
    for foreign in ("COLLEAGUEMARKER", "COLLEAGUECHAT", "colleague", "BETAMARKER", "beta-plan", "Beta"):
        assert foreign not in text, foreign


def test_usage_holds_only_what_the_person_spent(world, account_a, client, run_jobs):
    """The colleague's ingestion was charged to the colleague: not in the person's usage."""
    archive = _zip(client, _export(_login(client, world["person"]), run_jobs)["download_url"])
    usage = json.loads(archive.read(f"{_folder(archive, account_a)}/usage.json"))
    assert not any(str(world["theirs"].pk) in e["reference"].split(":")[1:2] for e in usage)


def test_pending_ingestion_content_is_included(world, account_a, client, run_jobs, queue):
    person = world["person"]
    with account_context(account_a, user=person):
        pending, _ = document_upload(
            account=account_a,
            actor=person,
            upload=SimpleUploadedFile("draft.txt", b"DRAFTMARKER", content_type="text/plain"),
        )
        EmbeddingBatch.objects.for_account(account_a).create(
            account=account_a,
            document=pending,
            revision=1,
            batch_index=0,
            vectors=b"\x00\x00\x80\x3f" * 4,
            count=1,
            tokens=3,
            model="m",
            provider="p",
        )
    queue.empty()  # the draft stays pending: its ingestion is "in progress"
    archive = _zip(client, _export(_login(client, person), run_jobs)["download_url"])
    data = json.loads(archive.read(f"{_folder(archive, account_a)}/pending_ingestion.json"))
    assert [d["id"] for d in data["documents"]] == [pending.pk]
    assert data["embedding_batches"][0]["document_id"] == pending.pk
    assert data["embedding_batches"][0]["vectors_float32_base64"] == "AACAPwAAgD8AAIA/AACAPw=="


def test_a_document_the_person_uploaded_into_a_now_restricted_collection_is_still_theirs(
    world, account_a, client, run_jobs
):
    owner = account_a.test_owner
    with account_context(account_a, user=owner):
        vault = collection_create(account=account_a, actor=owner, name="Vault", restricted=True)
        document_move(account=account_a, actor=owner, document=world["mine"], collection=vault)
        secret, _ = document_upload(
            account=account_a,
            actor=owner,
            collection=vault,
            upload=SimpleUploadedFile("vault.txt", b"VAULTMARKER", content_type="text/plain"),
        )
    run_jobs()
    archive = _zip(client, _export(_login(client, world["person"]), run_jobs)["download_url"])
    documents = json.loads(archive.read(f"{_folder(archive, account_a)}/documents.json"))
    assert [d["id"] for d in documents] == [world["mine"].pk]
    assert documents[0]["collection"]["name"] == "Vault"
    assert "VAULTMARKER" not in _all_text(archive)


def test_a_deleted_account_is_not_exported(world, client, run_jobs):
    side = world["side"]
    account_delete(account=side, actor=side.test_owner)
    archive = _zip(client, _export(_login(client, world["person"]), run_jobs)["download_url"])
    manifest = json.loads(archive.read("export.json"))
    assert side.pk not in [a["id"] for a in manifest["accounts"]]


# --- limits: refused whole, never a partial file -----------------------------------------------


def _pending_uploads(account, user, count):
    with account_context(account, user=user):
        return [
            document_upload(
                account=account,
                actor=user,
                upload=SimpleUploadedFile(f"pending-{i}.txt", f"pending {i}".encode(), content_type="text/plain"),
            )[0]
            for i in range(count)
        ]


def test_too_many_pending_records_is_refused_with_what_to_do(world, account_a, client, run_jobs, queue, settings):
    settings.EXPORT_MAX_PENDING_RECORDS = 2
    _pending_uploads(account_a, world["person"], 3)
    queue.empty()
    files_before = _stored_exports()
    body = _export(_login(client, world["person"]), run_jobs)
    assert body["status"] == "refused" and body["download_url"] is None
    assert "more than 2 records" in body["error"] and "Wait for your documents to finish" in body["error"]
    assert _stored_exports() == files_before
    with user_context(world["person"]):
        assert DataExport.objects.for_user(world["person"]).get().file == ""


def test_the_default_record_limit_is_1000(settings):
    assert settings.EXPORT_MAX_PENDING_RECORDS == 1000
    assert settings.EXPORT_MAX_PENDING_BYTES == 10 * 1024 * 1024


def test_too_much_pending_data_is_refused(world, account_a, client, run_jobs, queue, settings):
    settings.EXPORT_MAX_PENDING_BYTES = 4096
    [pending] = _pending_uploads(account_a, world["person"], 1)
    with account_context(account_a):
        EmbeddingBatch.objects.for_account(account_a).create(
            account=account_a,
            document=pending,
            revision=1,
            batch_index=0,
            vectors=b"\x01" * 8192,
            count=1,
            tokens=1,
            model="m",
            provider="p",
        )
    queue.empty()
    body = _export(_login(client, world["person"]), run_jobs)
    assert body["status"] == "refused" and "4 KiB" not in body["error"]
    assert "MiB of data" in body["error"] and "delete documents that are still pending" in body["error"]


def test_another_members_pending_records_do_not_count(world, account_a, client, run_jobs, queue, settings):
    settings.EXPORT_MAX_PENDING_RECORDS = 2
    _pending_uploads(account_a, world["colleague"], 3)
    queue.empty()
    assert _export(_login(client, world["person"]), run_jobs)["status"] == "ready"


def test_too_many_file_bytes_is_refused(world, client, run_jobs, settings):
    settings.EXPORT_MAX_FILE_BYTES = 10
    body = _export(_login(client, world["person"]), run_jobs)
    assert body["status"] == "refused" and "Delete documents you no longer need" in body["error"]


def _stored_exports() -> set[str]:
    try:
        return set(default_storage.listdir("exports")[1])
    except FileNotFoundError:
        return set()


# --- who may fetch it, and for how long -------------------------------------------------------


def test_another_persons_export_is_404_and_its_link_is_404(world, client, run_jobs):
    body = _export(_login(client, world["person"]), run_jobs)
    client.logout()
    _login(client, world["colleague"])
    assert client.get(f"/api/v1/exports/{body['id']}/").status_code == 404
    response = client.get(body["download_url"])
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert client.get("/api/v1/exports/nope/").status_code == 404


def test_export_access_by_id_is_one_not_found_for_all(world, client, run_jobs):
    from core.errors import NotFound
    from exports.errors import ExportNotFound
    from exports.selectors import export_access_by_id

    body = _export(_login(client, world["person"]), run_jobs)
    with user_context(world["person"]):
        assert export_access_by_id(user=world["person"], export_id=str(body["id"])).pk == body["id"]
    with user_context(world["colleague"]):
        for export_id in (body["id"], "nope", None, -1, 2**63, True):
            with pytest.raises(ExportNotFound) as refused:
                export_access_by_id(user=world["colleague"], export_id=export_id)
            assert isinstance(refused.value, NotFound) and refused.value.status == 404


def test_a_link_for_another_export_is_404(world, client, run_jobs):
    first = _export(_login(client, world["person"]), run_jobs)
    second = _export(client, run_jobs)
    forged = first["download_url"].replace(f"/{first['id']}/", f"/{second['id']}/", 1)
    assert client.get(forged).status_code == 404
    assert client.get(f"/api/v1/exports/{first['id']}/download/not-a-token/").status_code == 404
    # Opaque: the link names neither the person nor the file.
    token = first["download_url"].rstrip("/").rsplit("/", 1)[1]
    assert re.fullmatch("[0-9a-f]{64}", token)


def test_api_keys_are_refused_403(world, account_a, client, run_jobs):
    body = _export(_login(client, world["person"]), run_jobs)
    client.logout()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_a)}"}
    for response in (
        client.post("/api/v1/exports/", **headers),
        client.get(f"/api/v1/exports/{body['id']}/", **headers),
        client.get(body["download_url"], **headers),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden" and "API keys" in response.json()["error"]["message"]


def test_anonymous_is_401(client):
    assert client.post("/api/v1/exports/").status_code == 401


def test_expired_export_is_410_and_the_cleanup_job_deletes_its_file(
    world, client, run_jobs, django_capture_on_commit_callbacks
):
    body = _export(_login(client, world["person"]), run_jobs)
    person = world["person"]
    with user_context(person):
        export = DataExport.objects.for_user(person).get(pk=body["id"])
        name = export.file
        DataExport.objects.for_user(person).filter(pk=export.pk).update(
            expires_at=timezone.now() - dt.timedelta(minutes=1)
        )
    assert default_storage.exists(name)
    response = client.get(body["download_url"])
    assert response.status_code == 410
    assert (
        response.json()["error"]["code"] == "export_expired"
        and "Request a new export" in response.json()["error"]["message"]
    )
    status = client.get(f"/api/v1/exports/{body['id']}/").json()
    assert status["status"] == "ready" and status["download_url"] is None and "expired" in status["error"]
    with django_capture_on_commit_callbacks(execute=True):
        cleanup_exports()
    assert not default_storage.exists(name)
    assert client.get(body["download_url"]).status_code == 410


def test_the_link_expires_after_export_ttl_hours(world, client, run_jobs, settings):
    settings.EXPORT_TTL_HOURS = 3
    body = _export(_login(client, world["person"]), run_jobs)
    with user_context(world["person"]):
        export = DataExport.objects.for_user(world["person"]).get(pk=body["id"])
    assert dt.timedelta(hours=2, minutes=59) < export.expires_at - export.finished_at <= dt.timedelta(hours=3)


# --- the row is the person's: at the database too ---------------------------------------------


def test_rls_hides_an_export_from_everyone_but_its_person(world, account_a, client, run_jobs):
    body = _export(_login(client, world["person"]), run_jobs)
    with account_context(account_a, user=world["colleague"]):
        assert not DataExport.all_people.filter(pk=body["id"]).exists()
    with account_context(account_a):  # the account's own context, no person
        assert not DataExport.all_people.filter(pk=body["id"]).exists()
    with user_context(world["person"]):
        assert DataExport.all_people.filter(pk=body["id"]).exists()
    with connection.cursor() as cursor:  # no context at all
        cursor.execute("SELECT count(*) FROM exports_dataexport")
        assert cursor.fetchone()[0] == 0


# --- the job --------------------------------------------------------------------------------


def test_the_job_is_idempotent(world, client, run_jobs):
    from exports.jobs import build_export

    body = _export(_login(client, world["person"]), run_jobs)
    person = world["person"]
    with user_context(person):
        before = DataExport.objects.for_user(person).get(pk=body["id"])
    build_export(export_id=body["id"], user_id=person.pk)
    with user_context(person):
        after = DataExport.objects.for_user(person).get(pk=body["id"])
    assert (after.file, after.finished_at) == (before.file, before.finished_at)
    assert _stored_exports() == {before.file.split("/")[-1]}


def test_asking_again_while_pending_returns_the_same_export(world, client, queue):
    _login(client, world["person"])
    first = client.post("/api/v1/exports/").json()
    second = client.post("/api/v1/exports/").json()
    assert first["id"] == second["id"] and queue.count == 1


# --- the overview page ----------------------------------------------------------------------


def test_the_overview_page_requests_an_export_and_offers_the_link(world, client, run_jobs):
    _login(client, world["person"])
    page = client.get("/").content.decode()
    assert 'id="your-data"' in page and 'id="export-request"' in page
    response = client.post("/exports/request/")
    assert response.status_code == 302
    assert "Preparing" in client.get("/").content.decode()
    run_jobs()
    page = client.get("/").content.decode()
    with user_context(world["person"]):
        export = DataExport.objects.for_user(world["person"]).get()
    assert export.status == ExportStatus.READY
    assert f'href="/api/v1/exports/{export.pk}/download/' in page and "Download your data" in page


def test_a_viewer_may_export_too_and_the_schema_lists_the_endpoints(world, client, run_jobs):
    """The person is a viewer in the side project: everyone in an account may export (data.export)."""
    viewer = add_member(world["side"], make_user("viewer@side.test"), role=Role.VIEWER)
    _login(client, viewer)
    assert 'id="export-request"' in client.get("/").content.decode()
    assert _export(client, run_jobs)["status"] == "ready"
    schema = client.get("/api/schema/?format=json").json()
    assert {"/api/v1/exports/", "/api/v1/exports/{export_id}/", "/api/v1/exports/{export_id}/download/{token}/"} <= set(
        schema["paths"]
    )


def test_the_overview_page_says_why_an_export_was_refused(world, account_a, client, run_jobs, queue, settings):
    settings.EXPORT_MAX_PENDING_RECORDS = 1
    _pending_uploads(account_a, world["person"], 2)
    queue.empty()
    _login(client, world["person"])
    client.post("/exports/request/")
    run_jobs()
    page = client.get("/").content.decode()
    assert "Refused" in page and "more than 1 records" in page and 'id="export-request"' in page
    assert "/download/" not in page


def test_an_export_keeps_no_name_of_a_document_the_person_may_no_longer_read(world, account_a, client, run_jobs):
    """Found from outside: a member removed from a restricted collection
    still found the document's name in their export (their old answers' citations and
    sources). The export follows the collection rules: the citation keeps its number, loses
    the name (docs/guide/collections.md)."""
    owner, person = account_a.test_owner, world["person"]
    with account_context(account_a, user=owner):
        vault = collection_create(account=account_a, actor=owner, name="Vault", restricted=True, user_ids=[person.pk])
        secret, _ = document_upload(
            account=account_a,
            actor=owner,
            collection=vault,
            upload=SimpleUploadedFile("takeover-plan.txt", b"VAULTMARKER", content_type="text/plain"),
        )
    run_jobs()
    with account_context(account_a, user=person):
        conversation = Conversation.objects.for_account(account_a).create(
            account=account_a, user=person, title="Vault question"
        )
        cited = {
            "n": 1,
            "document_id": secret.pk,
            "document_name": "takeover-plan.txt",
            "chunk_index": 0,
            "pages": None,
        }
        Message.objects.for_account(account_a).create(
            account=account_a,
            conversation=conversation,
            role="assistant",
            content="It says so [Document 1].",
            citations=[cited],
            sources=[{**cited, "score": 0.9}],
        )
    with account_context(account_a, user=owner):
        collection_update(account=account_a, actor=owner, collection=vault, user_ids=[])
    archive = _zip(client, _export(_login(client, person), run_jobs)["download_url"])
    assert "takeover-plan" not in _all_text(archive)
    conversations = json.loads(archive.read(f"{_folder(archive, account_a)}/conversations.json"))
    [answer] = [m for c in conversations if c["title"] == "Vault question" for m in c["messages"]]
    assert answer["citations"][0]["n"] == 1 and answer["citations"][0]["available"] is False
