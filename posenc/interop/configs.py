"""Reading transformers configs: what ``posenc.interop`` reads a model's config through.

``text_config(config)``: the config of the text decoder, the one whose sizes and rope parameters
``patch`` and the checks read (a vision-language config's ``text_config``, through transformers' own
``get_text_config``); the config itself for a text model or a dict. The one copy of this helper:
``patching``, ``families.structure``, ``families.check`` and ``families.found`` read it from here.
"""

from __future__ import annotations

from typing import Any


def text_config(config: Any) -> Any:
    """The config of ``config``'s text decoder (``config.get_text_config()``), or ``config``."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config
