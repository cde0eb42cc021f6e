from audit.actors import acting_as, actor_from_request


class AuditActorMiddleware:
    """Names the request's actor for the audit log. Runs after AccountContextMiddleware,
    which resolves the API key."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with acting_as(actor_from_request(request)):
            return self.get_response(request)
