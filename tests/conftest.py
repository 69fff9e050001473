import dspy
import pytest


@pytest.fixture(autouse=True)
def fresh_dspy_cache():
    """Each test starts with an empty in-memory cache and never reads DSPy's disk cache from earlier runs."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    yield


@pytest.fixture(scope="module")
def site():
    """The web kit's local test site (tests/fixtures/web/site/) on 127.0.0.1, one server per test module."""
    from fixtures.web.site_server import SiteServer

    with SiteServer() as server:
        yield server
