"""`{% your_data_export %}`: the overview page's "Your data" section, with the person's
latest export, its state and, while it lasts, its download link."""
from django import template
from django.conf import settings

from exports.selectors import export_latest
from exports.services import export_download_url, export_expired_message, export_is_expired

register = template.Library()


@register.inclusion_tag("exports/_your_data.html", takes_context=True)
def your_data_export(context):
    request = context["request"]
    export = export_latest(user=request.user)
    expired = export is not None and export.status == "ready" and export_is_expired(export)
    return {
        "may": context.get("may"),
        "export": export,
        "download_url": export_download_url(export) if export else None,
        "expired_message": export_expired_message(export) if expired else "",
        "ttl_hours": settings.EXPORT_TTL_HOURS,
        "csrf_token": context.get("csrf_token"),
    }
