"""Rows of a data set: a Hugging Face hub id, or a local file or folder read with no network access at all.

``datasets.load_dataset`` reaches for the network even for local files: it sends a download-count request
for the builder ("json", "parquet") and may look the name up on the hub. A user who points ``--source`` at
a local file may be offline, or may not want their data's use announced, so local loads run with the hub
switched to offline mode. The libraries read ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` when they are
imported, too early to set for one load; their code consults the module-level flags set here at call time.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
# (module, attribute, value while loading a local source)
_OFFLINE_FLAGS = (
    ("datasets.config", "HF_HUB_OFFLINE", True),
    ("datasets.config", "HF_DATASETS_OFFLINE", True),
    ("datasets.config", "HF_UPDATE_DOWNLOAD_COUNTS", False),
    ("huggingface_hub.constants", "HF_HUB_OFFLINE", True),
    ("huggingface_hub.constants", "HF_HUB_DISABLE_TELEMETRY", True),
)


@contextmanager
def offline_hub() -> Iterator[None]:
    """No hub lookups and no telemetry inside: any HTTP request of the hub client raises instead.

    Process-wide while it lasts (the loaders run before a run's threads start)."""
    import importlib

    saved = []
    for module_name, name, value in _OFFLINE_FLAGS:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def is_local(source: str) -> bool:
    return Path(source).expanduser().exists()


def load_rows(source: str, *, split: str, config: str | None = None) -> Any:
    """Rows of ``source``: a hub id, a folder in the hub layout (same configs and splits), or one
    ``.jsonl`` / ``.json`` / ``.parquet`` file (a single split: ``split`` and ``config`` do not apply)."""
    import datasets  # heavy import, only when loading

    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source must be a hub id or a local path, got {source!r}")
    path = Path(source).expanduser()
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"source file must be .jsonl, .json or .parquet, got {path.name!r}")
        with offline_hub():
            return datasets.load_dataset(builder, data_files=str(path), split="train")
    if path.is_dir():
        # Built in a cache of its own and kept in memory: datasets (5.2) keys the shared cache of a folder whose
        # README lists its data files by the folder's name and README alone, so another folder of that name, or
        # the same folder with new rows, would read the rows cached first.
        with offline_hub(), tempfile.TemporaryDirectory(prefix="tfgrpo-datasets-") as cache:
            return datasets.load_dataset(str(path), config, split=split, cache_dir=cache, keep_in_memory=True)
    return datasets.load_dataset(source, config, split=split)


def config_names(source: str) -> list[str]:
    """The configs of a hub id or of a local folder in the hub layout."""
    import datasets

    if is_local(source):
        with offline_hub():
            return datasets.get_dataset_config_names(str(Path(source).expanduser()))
    return datasets.get_dataset_config_names(source)
