from billing.selectors import balance_get


def credits(request):
    account = getattr(request, "account", None)
    if account is None or not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"credit_balance": balance_get(account=account)}
