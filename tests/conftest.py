import json

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


@pytest.fixture
def gsm_source(tmp_path):
    """A local jsonl with GSM8K's columns: question, and answer = worked solution ending in '#### N'."""
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q{i}: what is {i} plus 1?",
                                        "answer": f"Add one: {i}+1 = <<{i}+1={i + 1}>>{i + 1}.\n#### {i + 1}"}) + "\n"
                            for i in range(40)))
    return str(path)
