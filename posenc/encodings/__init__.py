"""Scheme modules: one file per scheme, each registering itself (see posenc.registry)."""
