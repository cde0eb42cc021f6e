from django.urls import path

from billing.api import CreditsView
from billing.billing_api import BillingView
from billing.budgets_api import BudgetDetailView, BudgetsView
from billing.purchases.api import CheckoutView

urlpatterns = [
    path("credits/", CreditsView.as_view(), name="api-credits"),
    path("budgets/", BudgetsView.as_view(), name="api-budgets"),
    path("budgets/<int:budget_id>/", BudgetDetailView.as_view(), name="api-budget"),
    path("billing/", BillingView.as_view(), name="api-billing"),
    path("billing/checkout/", CheckoutView.as_view(), name="api-billing-checkout"),
]
