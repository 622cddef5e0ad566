"""``OUT/index.html`` of ``posenc extend`` (placeholder until the page is written)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_page(out: Path, settings: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    path = out / "index.html"
    path.write_text(f"<pre>{json.dumps(settings)}\n{len(records)} records</pre>", encoding="utf-8")
    return path
