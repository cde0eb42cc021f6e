"""The overview page's "Your data" section: request an export (the section itself is the
`your_data_export` template tag, exports/templatetags/exports.py)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.permissions import Action, page_require
from accounts.sso.session import signed_in_with_sso
from exports.services import export_request


@login_required
@require_POST
def export_request_view(request):
    if getattr(request, "account", None) is None:
        raise Http404()
    page_require(request, Action.DATA_EXPORT)
    export_request(user=request.user, by_sso=signed_in_with_sso(request.session))
    messages.success(request, "Your data export is being prepared. Reload this page in a minute for its "
                              "download link.")
    return redirect("/#your-data")
