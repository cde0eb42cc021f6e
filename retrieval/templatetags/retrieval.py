"""The Knowledge base's "Embedding model" section, drawn into documents' page.

documents sits below retrieval, so its page cannot import the section's context; a
template tag is how Django lets one app's page show another app's widget.
"""

from django import template

from retrieval.views import embedding_panel

register = template.Library()


@register.inclusion_tag("retrieval/_embedding_model.html", takes_context=True)
def embedding_model_panel(context):
    request = context["request"]
    if getattr(request, "account", None) is None:
        return {"embedding": None}
    return {
        "embedding": embedding_panel(request, request.account),
        "csrf_token": context.get("csrf_token"),
        "request": request,
    }
