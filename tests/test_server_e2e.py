"""The scale-out path, for real: `tfgrpo train` and `tfgrpo eval` against an OpenAI-compatible HTTP server.

The test starts llama.cpp's own HTTP server (xllamacpp) on 127.0.0.1 with the embedded weights and points
the CLI at it with ``--lm openai/<name> --api-base http://127.0.0.1:PORT/v1``: the same path a user takes to
a vLLM or SGLang cluster (LiteLLM's OpenAI client, token usage read from the server's responses).
Slow: run with ``pytest -m e2e``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def openai_server():
    xllamacpp = pytest.importorskip("xllamacpp")
    from tfgrpo_dspy.lm.weights import ensure_weights

    params = xllamacpp.CommonParams()
    params.model.path = str(ensure_weights("qwen2.5-coder-1.5b"))
    params.n_parallel = 2
    params.n_ctx = 4096 * 2
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.verbosity = -1
    params.hostnames = ["127.0.0.1"]
    params.port = free_port()
    server = xllamacpp.Server(params)
    url = server.listening_address
    models = json.loads(urllib.request.urlopen(f"{url}/v1/models", timeout=30).read())
    assert models["models"] or models.get("data")
    yield f"{url}/v1"
    del server


def tfgrpo(*args: str, cache_dir: Path) -> subprocess.CompletedProcess:
    # A fresh DSPy cache: answers cached by an earlier run would carry no usage to count.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DSPY_CACHEDIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-m", "tfgrpo_dspy.cli", *args], capture_output=True, text=True,
                          env=env, timeout=3600)


def test_train_and_eval_through_an_openai_compatible_server(openai_server, tmp_path):
    lm = ["--lm", "openai/qwen2.5-coder-1.5b", "--api-base", openai_server, "--max-tokens", "256"]
    cache = tmp_path / "cache"
    trained = tfgrpo("train", "--task", "tickets", "--n", "3", "--group-size", "2", "--epochs", "1",
                     "--val-fraction", "0", "--no-summaries", "--num-threads", "2", "--out", str(tmp_path), *lm,
                     cache_dir=cache)
    assert trained.returncode == 0, trained.stderr[-3000:]
    stats = json.loads((tmp_path / "stats.json").read_text())
    policy = stats["policy_usage"]
    step = stats["steps"][0]
    assert step["rollouts"] == 6
    # One call per rollout; a reply cut off at max_tokens is recorded as a rollout error, and DSPy's
    # adapter fallbacks (ChatAdapter -> JSONAdapter -> JSON mode) may have spent more calls on it.
    if step["rollout_errors"] == 0:
        assert policy["calls"] == 6
    else:
        assert policy["calls"] >= 6
    assert policy["prompt_tokens"] > 6 * 100 and policy["completion_tokens"] > 0
    manifest = json.loads((tmp_path / "log" / "manifest.json").read_text())
    assert manifest["policy_lm"]["model"] == "openai/qwen2.5-coder-1.5b"

    evaluated = tfgrpo("eval", "--task", "tickets", "--n", "3", "--num-threads", "2", "--library",
                       str(tmp_path / "library.json"), "--out", str(tmp_path / "eval.json"), *lm, cache_dir=cache)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "no library" in evaluated.stdout and "with library" in evaluated.stdout
    reports = json.loads((tmp_path / "eval.json").read_text())
    assert reports["no library"]["num_examples"] == 3 and reports["no library"]["usage"]["prompt_tokens"] > 0
