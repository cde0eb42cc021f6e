from django.urls import path

from billing import views

urlpatterns = [
    path("", views.credits_view, name="credits"),
    path("billing/", views.billing_settings_view, name="billing-settings"),
    path("buy/", views.buy_view, name="buy"),
    path("budgets/", views.budget_set_view, name="budget-set"),
    path("budgets/<int:budget_id>/remove/", views.budget_remove_view, name="budget-remove"),
]
