import pytest


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """Each test stores its uploads and exports in a folder of its own."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
