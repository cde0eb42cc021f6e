"""`{% your_data_export %}`: the overview page's "Your data" section, with the person's
latest export, its state and, while it lasts, its download link."""

from django import template
from django.conf import settings

from accounts.sso.session import signed_in_with_sso, sso_shuts_out
from exports.build import left_out_message
from exports.selectors import export_latest
from exports.services import export_download_url, export_expired_message, export_is_expired

register = template.Library()


@register.inclusion_tag("exports/_your_data.html", takes_context=True)
def your_data_export(context):
    request = context["request"]
    export = export_latest(user=request.user)
    expired = export is not None and export.status == "ready" and export_is_expired(export)
    by_sso = signed_in_with_sso(request.session)
    return {
        "may": context.get("may"),
        # Said before asking: what a new export from this session would leave out.
        "sso_teams": [
            m.account.name for m in getattr(request, "memberships", []) if sso_shuts_out(m.account, by_sso=by_sso)
        ],
        "export": export,
        "download_url": export_download_url(export) if export else None,
        "expired_message": export_expired_message(export) if expired else "",
        "left_out": [left_out_message(entry) for entry in export.left_out] if export else [],
        "ttl_hours": settings.EXPORT_TTL_HOURS,
        "csrf_token": context.get("csrf_token"),
    }
