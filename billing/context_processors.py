from billing import pricing
from billing.budgets import budget_status_for
from billing.selectors import balance_get


def member_budgets(request) -> list:
    """The signed-in member's budgets in the request's account, read once per request."""
    if not hasattr(request, "_member_budgets"):
        request._member_budgets = budget_status_for(account=request.account, user=request.user)
    return request._member_budgets


def credits(request):
    account = getattr(request, "account", None)
    if account is None or not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    # The header shows the member's tightest budget beside the balance (one query when none).
    budgets = member_budgets(request)
    return {
        "credit_balance": balance_get(account=account),
        "credit_budget": min(budgets, key=lambda s: s.remaining) if budgets else None,
        "credit_price": pricing.price_text(),
    }
