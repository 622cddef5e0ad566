"""Scheme modules: one file per scheme, each registering itself (see posenc.registry)."""


def __getattr__(name: str):
    """``posenc.encodings.NAME`` imports the scheme module ``NAME`` on first use (as
    ``import posenc.encodings.NAME`` would), so a documented ``posenc.encodings.videorope.videorope_positions``
    resolves after ``import posenc``."""
    import importlib
    import pkgutil

    if not name.startswith("_") and name in {i.name for i in pkgutil.iter_modules(__path__)}:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
