from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    name = "documents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_created, account_deleted, principal_access_ended
        from billing import references
        from documents.lifecycle import account_documents_withdraw, collection_access_end
        from documents.selectors import document_ids_readable
        from documents.services import collections_for_new_account

        # Every new account starts with its default collection ("General").
        account_created.connect(collections_for_new_account, dispatch_uid="documents.default_collection")
        # A removed member's or revoked key's grants go with it; a deleted account's documents are purged.
        principal_access_ended.connect(collection_access_end, dispatch_uid="documents.collection_access_end")
        account_deleted.connect(account_documents_withdraw, dispatch_uid="documents.account_withdraw")
        # The ledger names documents only to those who may read them (restricted collections).
        # Documents by status and the ingestion queue on /metrics, read at scrape time.
        from documents import metrics

        metrics.register()
        references.readable_register(
            "document", lambda *, account, ids: document_ids_readable(account=account, document_ids=ids)
        )
