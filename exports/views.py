"""The overview page's "Your data" section: request an export (the section itself is the
`your_data_export` template tag, exports/templatetags/exports.py)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect

from accounts.permissions import Action, page_check
from accounts.sso.session import signed_in_with_sso
from core.pages import account_page
from exports.services import export_request


@account_page(page_check(Action.DATA_EXPORT), methods=("POST",))
def export_request_view(request):
    export_request(user=request.user, by_sso=signed_in_with_sso(request.session))
    messages.success(request, "Your data export is being prepared. Reload this page in a minute for its download link.")
    return redirect("/#your-data")
