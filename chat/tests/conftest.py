import pytest

HANDBOOK = (
    "# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year. Unused holiday "
    "carries over until March.\n\n# Laptops\n\nNew starters receive a laptop and a badge on day one."
)


@pytest.fixture
def ingest_text(fake_llm, upload_and_ingest):
    """Put a text document into an account's knowledge base through the real pipeline."""
    return lambda account, name, text: upload_and_ingest(account, name, text.encode())


@pytest.fixture
def handbook(account_a, ingest_text):
    return ingest_text(account_a, "handbook.md", HANDBOOK)


@pytest.fixture(autouse=True)
def _sockets_closed():
    """Every test websocket still open when its test ends is disconnected then."""
    yield
    from chat.tests.test_websocket import Socket

    Socket.close_all()
