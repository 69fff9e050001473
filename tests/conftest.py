import dspy
import pytest


@pytest.fixture(autouse=True)
def fresh_dspy_cache():
    """Each test starts with an empty in-memory cache and never reads DSPy's disk cache from earlier runs."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    yield
