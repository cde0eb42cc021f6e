"""Search over an account's chunks (being split into query / passages / maintenance)."""
from documents.search.query import *  # noqa: F401,F403
from documents.search.query import __all__  # noqa: F401
