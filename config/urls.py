from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from billing.purchases.views import stripe_webhook_view
from config.health import healthz
from config.metrics import metrics_view
from config.views import home_view

api_v1 = [
    path("", include("accounts.api_urls")),
    path("", include("audit.api_urls")),
    path("", include("billing.api_urls")),
    path("", include("documents.api_urls")),
    path("", include("retrieval.api_urls")),
    path("", include("sources.api_urls")),
    path("", include("chat.api_urls")),
    path("", include("exports.api_urls")),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    # Stripe's events (billing/purchases): signed by Stripe, no session, no CSRF token.
    path("billing/stripe/webhook/", stripe_webhook_view, name="stripe-webhook"),
    path(
        "api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="api-schema"
    ),
    # Swagger UI from this app (drf-spectacular-sidecar, pinned), its set-up script served
    # as a file of its own (?script=): nothing from a CDN, nothing inline for the CSP to block.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", authentication_classes=[], permission_classes=[]),
        name="api-docs",
    ),
    path("api/v1/", include(api_v1)),
    path("v1/", include("chat.openai_urls")),
    path("documents/", include((("documents.urls"), "documents"))),
    path("documents/", include(("retrieval.urls", "retrieval"))),
    path("documents/sources/", include(("sources.urls", "sources"))),
    path("chat/", include(("chat.urls", "chat"))),
    path("credits/", include(("billing.urls", "billing"))),
    path("exports/", include("exports.urls")),
    path("scim/v2/", include(("accounts.scim.urls", "scim"))),
    path("", home_view, name="home"),
    path("", include("accounts.urls")),
]

handler404 = "config.views.page_not_found"
handler500 = "config.views.server_error"
