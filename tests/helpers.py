"""Shared test helpers: dtype-derived tolerances, a small instance of any registered scheme, and
inputs for a module of any kind together with their float64 reference. Test files import them
from ``conftest`` by name (``from conftest import tolerance``), which hands them on from here; keep
the names stable:

    tolerance(dtype, magnitude=1.0)            absolute tolerance: a few eps of dtype × magnitude
    assert_close(actual, expected, ...)        torch/NumPy output against the float64 reference
    small_spec(name, **overrides)              spec of a small instance of any registered scheme
    small_module(name, **overrides)            posenc.build(small_spec(...)), seeded
    manual_seed(value)                         torch.manual_seed(value), cheaply on a machine without CUDA
    module_args(module, ...)                   the arguments ``module(*args)`` takes, by kind
    on_axes(module, positions)                 one-axis positions spread over the module's axes
    reference_output(module, args)            ``module.reference`` on the same arguments
    attention_reference(q, k, v, pe, ...)      float64 ``posenc.attention`` of any kind
    attention_parameters(pe)                   the parameters attention reads (not bipe's ``intra``)
    schemes_of_kind(*kinds)                    registered scheme names of these kinds
    in_fork(fn, *args)                         ``fn(*args)`` in a forked child: (status, result, stdout, stderr)
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
from hypothesis import HealthCheck, settings

import posenc
from posenc import registry
from posenc import reference as ref
from conftest import WORKER_CPUS

if WORKER_CPUS is not None:
    torch.set_num_threads(WORKER_CPUS)

settings.register_profile(
    "posenc", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("posenc")

# -- tolerances --------------------------------------------------------------------------------

ULPS = 4
"""How many eps of the working dtype a fast path may differ from the float64 reference by, per
unit of magnitude (flash-attention's rule: a few eps of the dtype times the size of the values)."""

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The working dtypes every module is checked at against the float64 reference."""


def tolerance(dtype: torch.dtype, magnitude: float = 1.0) -> float:
    """Absolute tolerance for a result in ``dtype`` whose values (or intermediate values, e.g.
    attention scores) are of size ``magnitude``: ``ULPS · eps(dtype) · magnitude``."""
    return ULPS * torch.finfo(dtype).eps * max(float(magnitude), torch.finfo(dtype).tiny)


def _numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return (x.double() if x.is_floating_point() else x).numpy()
    return np.asarray(x)


def assert_close(actual, expected, *, dtype: torch.dtype | None = None, magnitude: float | None = None,
                 what: str = "") -> None:
    """``actual`` (a tensor in the working dtype) equals the float64 ``expected`` within
    ``tolerance(dtype, magnitude)``; ``dtype`` defaults to the dtype of ``actual`` and
    ``magnitude`` to the largest ``|expected|``."""
    if dtype is None:
        dtype = actual.dtype if isinstance(actual, torch.Tensor) else torch.float64
    a, e = _numpy(actual), _numpy(expected).astype(np.float64)
    assert a.shape == e.shape, f"{what} shape {a.shape} != reference shape {e.shape}"
    finite = np.isfinite(e)
    assert np.array_equal(np.isfinite(a), finite), f"{what}: non-finite values differ from the reference"
    if magnitude is None:
        magnitude = float(np.abs(e[finite]).max()) if finite.any() else 1.0
    tol = tolerance(dtype, magnitude)
    err = float(np.abs(a[finite] - e[finite]).max()) if finite.any() else 0.0
    assert err <= tol, f"{what} max |error| {err:.3g} > tolerance {tol:.3g} ({dtype}, magnitude {magnitude:.3g})"


# -- a small instance of any scheme ------------------------------------------------------------

SMALL = {"d_model": 32, "head_dim": 8, "num_heads": 4, "max_positions": 2048, "floor_scale": 4,
         "bias_init": "uniform"}
"""Sizes given to any scheme that takes these parameters (required or not), so that tensors built
by ``module_args`` fit every module: d_model = num_heads · head_dim; ``floor_scale`` (Llama 4's
NoPE temperature) steps every 4 positions, so short test inputs see it; ``bias_init`` (PoPE's
phase per head) draws δ from U(−2π, 0), so the tests see the query's phase term (δ = 0 hides it)
and a gradient away from the edge of its clamp."""


def assert_directional_gradients(leaves: dict, loss, *, seed: int, eps: float = 1e-6, rtol: float = 1e-7) -> None:
    """Each leaf's ``.grad`` along a random direction equals the central difference of ``loss()``
    (a float64 reference of the same scalar) along it; the leaves are restored afterwards."""
    g = torch.Generator().manual_seed(seed)
    for name, leaf in leaves.items():
        direction = torch.randn(leaf.shape, generator=g, dtype=torch.float64)
        with torch.no_grad():
            leaf += eps * direction
            up = loss()
            leaf -= 2 * eps * direction
            down = loss()
            leaf += eps * direction
        numeric = (up - down) / (2 * eps)
        assert abs(float((leaf.grad * direction).sum()) - numeric) < rtol * max(1.0, abs(numeric)), name


def schemes_of_kind(*kinds: str) -> list[str]:
    """Registered scheme names of the given kinds (all of them when none are given)."""
    return [n for n in registry.schemes() if not kinds or registry.get(n).kind in kinds]


def small_spec(name: str, **overrides) -> dict:
    """The spec of a small instance of ``name``: every parameter named in ``SMALL`` that the scheme
    takes, then ``overrides`` (passed through unchecked, so a wrong key still raises in build)."""
    scheme = registry.get(name)
    spec = {"scheme": name, **{k: v for k, v in SMALL.items() if k in scheme.params}}
    spec.update(overrides)
    missing = [k for k in scheme.required if k not in spec]
    if missing:
        raise LookupError(f"small_spec: no small value for required parameter(s) {missing} of scheme "
                          f"{name!r}; add one to SMALL in tests/helpers.py")
    return spec


def manual_seed(value: int) -> None:
    """What ``torch.manual_seed(value)`` does for these tests, without its cost on a machine without
    CUDA: seeds the CPU generator, and CUDA's where it is available. ``torch.manual_seed`` also asks
    each accelerator not yet started (CUDA, XPU, MTIA) to seed itself when it starts, and each such
    request formats the whole call stack (traceback.format_stack), 0.5 ms at pytest's depth: about 4 s of
    CPU over the suite's 7,000 seedings (the autouse ``conftest._seed`` and ``small_module``)."""
    torch.default_generator.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


def small_module(name: str, *, seed: int = 0, **overrides):
    """``posenc.build(small_spec(name, **overrides))`` with learned tables drawn from ``seed``."""
    manual_seed(seed)
    return posenc.build(small_spec(name, **overrides))


def heads_dim(module) -> tuple[int, int]:
    """The (H, D) of the q/k tensors a module expects."""
    return (getattr(module, "num_heads", None) or SMALL["num_heads"],
            getattr(module, "head_dim", None) or SMALL["head_dim"])


def positions(length: int, *, offset: int = 0, batch: int | None = None) -> torch.Tensor:
    """``offset + arange(length)``; with ``batch``, ``[batch, length]`` rows at different offsets."""
    p = torch.arange(length) + offset
    if batch is None:
        return p
    return torch.stack([p + 3 * i for i in range(batch)])


def on_axes(module, p):
    """One-axis positions ``[..., L]`` as the module's ``[..., L, A]`` (unchanged when A = 1): axis
    ``a`` at ``p // (a + 1) + a``, so the axes differ; torch or NumPy."""
    axes = getattr(module, "axes", 1) if module is not None else 1
    if axes == 1:
        return p
    cols = [p // (a + 1) + a for a in range(axes)]
    return torch.stack(cols, dim=-1) if isinstance(p, torch.Tensor) else np.stack(cols, axis=-1)


def module_args(module, *, length: int = 11, key_length: int | None = None, batch: int = 2, offset: int = 0,
                dtype: torch.dtype = torch.float32, batched: bool = False, seed: int = 0) -> tuple:
    """Arguments for ``module(*args)`` by kind, with queries at the last ``length`` of
    ``key_length`` key positions (a KV cache) shifted by ``offset``; ``batched`` gives ``[B, L]``
    positions that differ across the batch.

    none/rotary: ``(x, positions)``; additive: ``(positions,)``; bias: ``(q_positions, k_positions)``;
    relative: ``(q, k, q_positions, k_positions)``; content: ``(q, k, v, hidden or None)``.
    """
    g = torch.Generator().manual_seed(seed)
    lk = length if key_length is None else key_length
    b = batch if batched else None
    kpos = on_axes(module, positions(lk, offset=offset, batch=b))
    qpos = on_axes(module, positions(length, offset=offset + lk - length, batch=b))
    h, d = heads_dim(module)
    kind = module.kind
    if kind in ("none", "rotary"):
        return (torch.randn(batch, h, length, d, generator=g).to(dtype), qpos)
    if kind == "additive":
        return (qpos,)
    if kind == "bias":
        return (qpos, kpos)
    if kind == "relative":
        q = torch.randn(batch, h, length, d, generator=g).to(dtype)
        k = torch.randn(batch, h, lk, d, generator=g).to(dtype)
        return (q, k, qpos, kpos)
    if kind == "content":  # queries are the last `length` keys; hidden for a scheme that reads it
        q = torch.randn(batch, h, length, d, generator=g).to(dtype)
        k = torch.randn(batch, h, lk, d, generator=g).to(dtype)
        v = torch.randn(batch, h, lk, d, generator=g).to(dtype)
        hidden = torch.randn(batch, lk, module.d_model, generator=g).to(dtype) if module.reads_hidden else None
        return (q, k, v, hidden)
    raise AssertionError(f"unknown kind {kind!r}")


def attention_parameters(pe) -> dict:
    """The parameters attention reads and trains: all that require a gradient (not FoPE's fixed
    coefficients), less the additive part a scheme carries for the token embeddings (bipe's
    ``intra``, applied by ``pe.embedding``, not by attention)."""
    intra = {id(p) for p in pe.intra.parameters()} if hasattr(pe, "embedding") else set()
    return {n: p for n, p in pe.named_parameters() if id(p) not in intra and p.requires_grad}


def reference_output(module, args: tuple) -> np.ndarray:
    """``module.reference`` on ``args`` as NumPy (float tensors as float64 of their rounded values)."""
    return np.asarray(module.reference(*[_numpy(a) for a in args]), dtype=np.float64)


def attention_reference(q, k, v, pe=None, *, q_positions=None, k_positions=None, causal: bool = False,
                        scale: float | None = None) -> np.ndarray:
    """Float64 ``posenc.attention``: the reference of ``pe`` applied by kind, then ``ref.attention``.

    Default positions are those of a KV cache: keys at ``0..Lk-1``, queries the last ``Lq`` (on
    every axis of a module with several).
    A relative scheme with its own reference attention (``reference_attention``) uses it.
    """
    qn, kn, vn = _numpy(q), _numpy(k), _numpy(v)
    lq, lk = qn.shape[-2], kn.shape[-2]
    axes = getattr(pe, "axes", 1)
    qp = np.arange(lk - lq, lk) if q_positions is None else _numpy(q_positions)
    kp = np.arange(lk) if k_positions is None else _numpy(k_positions)
    if axes > 1 and q_positions is None:
        qp = np.repeat(qp[:, None], axes, axis=1)
    if axes > 1 and k_positions is None:
        kp = np.repeat(kp[:, None], axes, axis=1)
    kind = "none" if pe is None else pe.kind
    bias = None
    if kind == "rotary":  # every rotary module takes role= (xPos scales q and k differently)
        if scale is None:  # 1/√D of the head given to attention (pope's map widens q and k)
            scale = 1.0 / np.sqrt(qn.shape[-1])
        qn, kn = pe.reference(qn, qp, role="query"), pe.reference(kn, kp, role="key")
    elif kind == "bias":
        bias = pe.reference(qp, kp)  # (H, Lq, Lk) or (B, H, Lq, Lk)
    elif kind == "relative":
        if hasattr(pe, "reference_attention"):
            return pe.reference_attention(qn, kn, vn, qp, kp, causal=causal, scale=scale)
        bias = pe.reference(qn, kn, qp, kp)
    elif kind == "none" and pe is not None:  # NoPE: unchanged; a temperature scales the queries
        qn = pe.reference(qn, qp)
    elif kind != "none":
        raise AssertionError(f"attention does not take kind {kind!r}")
    return ref.attention(qn, kn, vn, bias=bias, causal=causal, scale=scale)


def _one_thread() -> None:
    """torch in this process on one thread, inductor's compiling too (``in_fork``'s child)."""
    torch.set_num_threads(1)
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if "torch._inductor.config" in sys.modules:
        from torch._inductor import config

        config.compile_threads = 1


def in_fork(fn, *args, timeout: float = 900.0) -> tuple[int, object, str, str]:
    """``fn(*args)`` in a child forked from this process: a process of its own (its peak memory,
    its limits, the schemes it registers stay there) without a new interpreter's start, which
    imports torch and posenc again (1.5 s of CPU, and inductor's 3 s where it compiles).

    The child runs torch on one thread and compiles with inductor in that thread: the threads of
    an OpenMP pool, or of inductor's compile pool, that the parent started (outside xdist, where a
    worker has one CPU) are not there after a fork, and whatever waited on them would wait forever.

    Returns the child's exit status (0 when ``fn`` returned, a ``SystemExit``'s code, 1 after any
    other exception, whose traceback is on its standard error), what ``fn`` returned (None unless it
    returned), and its standard output and error, which go to files of their own. A child still
    running after ``timeout`` seconds is killed (status -9, and its standard error says so)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as kept:
        pid = os.fork()
        if pid == 0:  # the child: it never returns into the test session
            status = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
                _one_thread()
                pickle.dump(fn(*args), kept)
                kept.flush()
                status = 0
            except SystemExit as stop:
                status = stop.code if isinstance(stop.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        deadline = time.monotonic() + timeout
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        if not done[0]:
            os.kill(pid, signal.SIGKILL)
            done = os.waitpid(pid, 0)
            err.write(f"\nin_fork: killed after {timeout:g} s\n".encode())
        status = os.waitstatus_to_exitcode(done[1])
        for f in (out, err, kept):
            f.seek(0)
        result = pickle.load(kept) if status == 0 else None
        return status, result, out.read().decode(errors="replace"), err.read().decode(errors="replace")
