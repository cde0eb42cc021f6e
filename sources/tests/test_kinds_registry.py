"""The kinds of source are named once, in their modules (sources/kinds/): the model's choices,
the API's validation and schema, and the Sources page all read the registry."""

import yaml

from core.tenancy import account_context
from sources.kinds import kind_choices, kind_for, registry
from sources.models import Source


def test_every_kind_module_declares_itself_and_the_choices_follow():
    kinds = list(registry().values())
    assert [kind.name for kind in kinds] == ["web", "git"]
    for kind in kinds:
        assert kind_for(kind.name) is kind and kind.label and kind.description
        assert all(option.name and option.label and option.example for option in kind.options)
    assert kind_choices() == [("web", "Web site"), ("git", "Git repository")]
    assert list(Source._meta.get_field("kind").choices) == kind_choices()


def test_an_unknown_kind_is_refused_naming_the_registered_ones(api_a):
    response = api_a.post("/api/v1/sources/", {"kind": "notion", "url": "http://example.com/"})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_kind",
        "field": "kind",
        "message": "`kind` must be one of: web, git.",
    }


def test_the_schema_lists_the_registered_kinds_and_their_options(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["components"]["schemas"]["SourceKindEnum"]["enum"] == ["web", "git"]
    options = schema["components"]["schemas"]["SourceCreateRequest"]["properties"]["options"]
    assert options["description"] == 'git: {"branch"?, "path"?}'


def test_the_page_offers_every_kind_and_its_options(client, owner_a):
    client.force_login(owner_a)
    page = client.get("/documents/sources/").content.decode()
    assert '<option value="web">Web site</option>' in page and '<option value="git">Git repository</option>' in page
    assert 'name="git-branch"' in page and 'name="git-path"' in page and 'name="web-' not in page


def test_a_git_source_added_on_the_page_keeps_its_branch_and_folder(
    client, owner_a, account_a, settings, fake_llm, queue
):
    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]
    client.force_login(owner_a)
    response = client.post(
        "/documents/sources/new/",
        {
            "kind": "git",
            "url": "http://127.0.0.1/team/handbook.git",
            "git-branch": "release/2.0",
            "git-path": "docs/",
            "web-branch": "ignored",
        },
        follow=True,
    )
    assert 'role="alert"' not in response.content.decode(), response.content.decode()
    with account_context(account_a):
        source = Source.objects.for_account(account_a).get()
    assert (source.kind, source.options) == ("git", {"branch": "release/2.0", "path": "docs"})
    assert "Git repository" in client.get("/documents/sources/").content.decode()


def test_a_bad_option_on_the_page_is_the_kinds_message(client, owner_a, account_a, settings):
    settings.SOURCES_ALLOWED_HOSTS = ["127.0.0.1"]
    client.force_login(owner_a)
    response = client.post(
        "/documents/sources/new/", {"kind": "git", "url": "http://127.0.0.1/h.git", "git-branch": "-bad"}, follow=True
    )
    assert "`options.branch` must be a branch name" in response.content.decode()
    with account_context(account_a):
        assert not Source.objects.for_account(account_a).exists()
