from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from accounts.signals import account_deleted
        from documents.models import ReindexRun
        from documents.run_kinds import run_kind_register
        from retrieval.embedding_models import migration_cancel, migration_run
        from retrieval.jobs import account_vector_index_withdraw

        # An embedding-model migration is a ReindexRun that documents runs, re-queues and
        # cancels like its own; the work is retrieval's (documents/run_kinds.py).
        run_kind_register(ReindexRun.RunKind.MIGRATION, run=migration_run, cancel=migration_cancel)
        # A deleted account's own vector index goes with it.
        account_deleted.connect(account_vector_index_withdraw, dispatch_uid="retrieval.account_index")
