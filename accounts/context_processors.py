def current_account(request):
    return {
        "current_account": getattr(request, "account", None),
        "current_membership": getattr(request, "membership", None),
        "memberships": getattr(request, "memberships", []),
    }
