"""Support staff see sources and their syncs in the admin, read-only."""

from django.urls import reverse

from accounts.tests.factories import make_user
from core.tenancy import account_context
from sources.models import Source, SourceSync


def test_staff_read_sources_and_syncs(client, account_a):
    with account_context(account_a):
        source = Source.objects.for_account(account_a).create(
            account=account_a,
            kind="web",
            url="http://a.example/",
            status="failed",
            error="HTTP 404 at http://a.example/",
        )
        sync = SourceSync.objects.for_account(account_a).create(account=account_a, source=source, status="failed")
    client.force_login(make_user("root@groundwork.test", is_staff=True, is_superuser=True))
    for model, obj in ((Source, source), (SourceSync, sync)):
        opts = model._meta
        page = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        assert page.status_code == 200 and "a.example" in page.content.decode()
        assert client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])).status_code == 200
        assert client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
