"""posenc.attention used as a training or decoding loop uses it, in a process of its own: ``loop()``
runs in a child that test_flex.py forks from its worker (``conftest.in_fork``), and ``python
tests/flex_loop.py`` runs it alone (printing one JSON line).

No dynamo reset anywhere: first many calls with distinct lengths, dtypes, schemes and backends
(each checked against the float64 reference), then one long FlexAttention call whose peak memory
(VmHWM) is measured. The address space is capped at what the process holds when the loop starts
plus ``HEADROOM``, so a path that builds the whole ``[B, H, Lq, Lk]`` score tensor dies instead of
swapping the machine. The process's compiled flex cases are forgotten first (``posenc.attn._FLEX``):
the loop's cases compile in it as in a new process.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LONG = 6144  # the long call: 4 heads x 6144^2 float32 scores are 604 MB if anything materializes them
HEADS, DIM = 4, 8  # conftest's SMALL sizes
HEADROOM = 4 << 30  # address space beyond what the process holds (a new one held ~2 GB of a 6 GB cap)


def vm_hwm() -> int:
    """Peak resident memory of this process so far, in bytes."""
    return _status("VmHWM")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def loop() -> dict:
    """The loop in this process (a child of its own: it caps the address space and sets one
    thread); what ``python tests/flex_loop.py`` prints."""
    cap = _status("VmSize") + HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import numpy as np
    import torch

    import posenc
    import posenc.attn
    from conftest import attention_reference, small_module, tolerance

    torch.set_num_threads(1)
    posenc.attn._FLEX.clear()
    torch.manual_seed(0)
    fallbacks: list[str] = []
    errors: list[dict] = []

    def check(out, q, k, v, pe, what, **kw):
        expected = attention_reference(q, k, v, pe, **kw)
        err = float(np.abs(out.double().numpy() - expected).max())
        tol = tolerance(q.dtype, max(1.0, float(np.abs(expected).max())))
        errors.append({"what": what, "err": err, "tol": tol})

    alibi = small_module("alibi")
    others = {n: small_module(n) for n in ("t5", "kerple", "shaw", "rope")}
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for i, length in enumerate(range(64, 64 + 12 * 13, 13)):  # 12 distinct lengths: past dynamo's limit of 8
            dtype = dtypes[i % 3]
            q, k, v = (torch.randn(1, HEADS, length, DIM).to(dtype) for _ in range(3))
            lq = length if i % 2 else 1 + i  # full passes and decoding steps
            out = posenc.attention(q[:, :, -lq:], k, v, alibi, causal=True, backend="flex")
            check(out, q[:, :, -lq:], k, v, alibi, f"alibi flex L={length} {dtype}", causal=True)
            name = ("t5", "kerple", "shaw", "rope")[i % 4]  # other schemes and backends in between
            backend = ("materialize", "chunked")[i % 2] if name != "rope" else "auto"
            pe = others[name]
            out = posenc.attention(q, k, v, pe, causal=bool(i % 2), backend=backend)
            check(out, q, k, v, pe, f"{name} {backend} L={length} {dtype}", causal=bool(i % 2))
        compiles = _compiles(next(fn for key, fn in posenc.attn._FLEX.items() if key[0] == "alibi"))
        before = vm_hwm()
        q, k, v = (torch.randn(1, HEADS, LONG, DIM) for _ in range(3))
        out = posenc.attention(q, k, v, alibi, causal=True, backend="flex")  # (auto takes blockwise on the CPU)
        peak = vm_hwm()
        tail = 8  # the last queries against the reference (the whole float64 map would be 1.2 GB)
        expected = attention_reference(q[:, :, -tail:], k, v, alibi, causal=True)
        err = float(np.abs(out[:, :, -tail:].double().numpy() - expected).max())
        errors.append({"what": f"alibi flex L={LONG}", "err": err, "tol": tolerance(torch.float32, 4)})
        fallbacks = [str(w.message) for w in caught if w.category.__name__ == "FlexFallbackWarning"]

        # A case out of recompiles runs chunked, says so once, and stays exact: packed documents
        # without a bias (a new case) with a budget of one compile, at two lengths.
        posenc.attn.FLEX_RECOMPILES = 1
        late = len(caught)
        for lengths in ([100, 60, 40], [128, 39], [70, 90, 3]):
            pack = posenc.packing(lengths)
            n = len(pack.positions)
            q, k, v = (torch.randn(1, HEADS, n, DIM) for _ in range(3))
            out = posenc.attention(q, k, v, None, document_ids=pack.document_ids, backend="flex")
            cu = pack.cu_seqlens.tolist()
            err = max(float((out[:, :, a:b] - posenc.attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], None))
                            .abs().max()) for a, b in zip(cu, cu[1:]))
            errors.append({"what": f"documents {lengths} flex", "err": err, "tol": tolerance(torch.float32, 16)})
        budget = [str(w.message) for w in caught[late:] if w.category.__name__ == "FlexFallbackWarning"]
    return {"before": before, "peak": peak, "errors": errors, "fallbacks": fallbacks, "budget_fallbacks": budget,
            "alibi_compiles": compiles}


def _compiles(compiled) -> int:
    """How many graphs dynamo holds for one flex case (``posenc.attn._FLEX``'s value): its compiles."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(compiled._torchdynamo_orig_callable.__code__))


if __name__ == "__main__":
    print(json.dumps(loop()))
