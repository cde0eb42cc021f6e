"""The MCP tools' arguments that have no REST serializer to borrow (search and ask use the
REST API's own: retrieval.api.SearchRequestSerializer, chat.serializers.ChatRequestSerializer)."""

from rest_framework import serializers

from core.api import CursorPagination
from documents.models import Status


class DocumentListArguments(serializers.Serializer):
    """`list_documents`: the REST list's filters, and a page by offset (an MCP client has no
    `next` URL to follow)."""

    query = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=255, help_text="Name contains"
    )
    status = serializers.ChoiceField(choices=Status.values, required=False, allow_null=True)
    limit = serializers.IntegerField(min_value=1, max_value=CursorPagination.max_page_size, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=2**31, default=0)
