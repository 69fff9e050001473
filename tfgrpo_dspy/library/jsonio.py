"""JSON files a person can read, written so that no reader ever sees half a file, read with one clear error."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(path: Path) -> Any:
    """Parse a JSON file; any failure is one ValueError naming the file (never a raw decoder trace)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"{path} is not valid JSON: {reason}") from None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file in the same folder, then rename: readers never see half a file.

    Text that UTF-8 cannot encode (a lone surrogate in an LM's output) is replaced, not fatal.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    encoded = (json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(encoded)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
