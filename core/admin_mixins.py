"""Shared by every admin of a tenant-owned model."""


class AllAccountsMixin:
    """Tenant models in the admin read through the explicit cross-account manager."""

    def get_queryset(self, request):
        qs = self.model.all_accounts.get_queryset()
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs
