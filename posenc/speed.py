"""Speed and memory benchmark behind ``posenc bench``.

Performance is measured, never assumed: every number is a median over interleaved repeats,
reported as a ratio, in the same run, to two baselines and to the peers (transformers,
rotary-embedding-torch):

- ``copy_``: ``out.copy_(x)`` into a warm preallocated tensor (the same bytes read and written,
  no allocation: the memory roofline). ``apply_rotary(..., out=out)`` is divided by it.
- ``clone``: ``x.clone()`` (a copy into fresh memory: for large tensors the allocation's page
  faults cost several times the copy). The allocating ``apply_rotary`` is divided by it.

Cases:

- ``rotary``: posenc's rope module forward ``(x, positions)`` (cos/sin from float64 angles, or
  from the module's table of them where it keeps one), posenc's ``apply_rotary`` with cos/sin
  precomputed, allocating and into a warm ``out`` (so the reader sees what the float64 angles
  and the allocation cost), the cos/sin alone, transformers' ``apply_rotary_pos_emb`` with
  cos/sin precomputed as transformers does, rotary-embedding-torch's ``rotate_queries_or_keys``
  (its cache warmed); forward and forward+backward. Plus a decoding step: one token per sequence
  at a position offset (``Profile.decode``), where per-call overhead, not memory, decides.
- ``attention``: the bias schemes through ``posenc.attention`` (auto backend, and
  ``backend="blockwise"``), a materialized bias map + SDPA, and plain causal SDPA (the floor);
  forward, and (up to ``train_max``) forward+backward with gradients for q, k, v and the scheme's
  parameters. Each case runs in a fresh subprocess, its address space capped at
  ``memory_cap_gb`` (``RLIMIT_AS``), so that its peak RSS is its own (see ``peak_rss_gb``) and a
  case that would exhaust a shared machine fails alone.

Peers are imported lazily here; a missing peer is reported as such and the benchmark goes on.
Notation used for tensor shapes: B batch, H heads, L length, D head dim.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

WHATS = ("rotary", "attention")
DTYPES = ("float32", "bfloat16")
LAYOUTS = ("half", "interleaved")


@dataclass(frozen=True)
class Profile:
    """Sizes and repeats of one benchmark run."""

    shapes: tuple[tuple[int, int, int, int], ...]  # (B, H, L, D) of the rotary cases
    # (B, H, L, D, offset) of the decoding-step cases: L tokens at positions offset..offset+L-1
    decode: tuple[tuple[int, int, int, int, int], ...] = ((8, 32, 1, 128, 4095),)
    dtypes: tuple[str, ...] = DTYPES
    layouts: tuple[str, ...] = LAYOUTS
    partial: bool = True  # also rotary_dim = D/2
    repeats: int = 7  # interleaved rounds; the median is reported
    min_sample_s: float = 0.02  # calls per sample grow until one sample lasts this long
    lengths: tuple[int, ...] = ()  # attention lengths
    schemes: tuple[str, ...] = ("alibi", "t5")
    heads: int = 8
    head_dim: int = 64
    # A materialized [H, L, L] bias (built in float64, then cast and masked) peaked at 6.9 GB
    # at L=8192 (13 bytes per score); 16384 would need ~28 GB. 8192 is safe on 24 GB.
    materialize_max: int = 8192
    attention_repeats: int = 1  # posenc (flex) calls timed after the first, which compiles
    # forward+backward cases (issue 10's training goals) at the lengths up to train_max
    train_schemes: tuple[str, ...] = ("alibi", "t5", "kerple", "fire")
    train_max: int = 32768
    # Address-space cap of each attention case: the largest planned case (a materialized map at
    # 8192) peaked at 6.9 GB RSS; 12 GB leaves room for torch's virtual reservations and for the
    # other jobs of a shared 24 GB machine.
    memory_cap_gb: float = 12.0


PROFILES = {
    "full": Profile(shapes=((1, 32, 4096, 128), (4, 8, 1024, 64)), repeats=9,
                    lengths=(1024, 2048, 4096, 8192, 16384, 32768), schemes=("alibi", "t5", "kerple", "fire"),
                    train_max=8192),
    "quick": Profile(shapes=((1, 32, 4096, 128),), repeats=3,
                     lengths=(1024, 8192), materialize_max=1024, train_schemes=("alibi", "fire"), train_max=1024),
}


# -- timing -----------------------------------------------------------------------------------

def time_interleaved(fns: dict[str, Callable[[], object]], *, repeats: int,
                     min_sample_s: float = 0.02) -> dict[str, float]:
    """Median seconds per call of each function, the candidates interleaved round by round.

    Each function is warmed up twice; a sample is ``n`` back-to-back calls with ``n`` chosen so
    that a sample lasts ``min_sample_s``; round ``r`` starts at candidate ``r mod len(fns)``, so
    no candidate always runs right after the same neighbour.
    """
    names = list(fns)
    calls = {}
    for name in names:
        fns[name]()
        t0 = time.perf_counter()
        fns[name]()
        one = max(time.perf_counter() - t0, 1e-7)
        calls[name] = max(1, min(1000, int(min_sample_s / one)))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = fns[name], calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {n: statistics.median(s) for n, s in samples.items()}


# -- rotary -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RotaryCase:
    batch: int
    heads: int
    length: int
    head_dim: int
    dtype: str
    layout: str
    rotary_dim: int
    offset: int = 0  # positions are offset..offset+length-1

    @property
    def label(self) -> str:
        part = "" if self.rotary_dim == self.head_dim else f" rd={self.rotary_dim}"
        at = f" @{self.offset}" if self.offset else ""
        dt = {"float32": "f32", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return f"{self.batch}x{self.heads}x{self.length}x{self.head_dim}{at} {dt} {self.layout[:5]}{part}"


def rotary_cases(profile: Profile) -> list[RotaryCase]:
    """Every shape (then decoding step) x dtype x layout, with full and (if ``profile.partial``)
    half rotary_dim."""
    cases = []
    for b, h, length, d, offset in [(*shape, 0) for shape in profile.shapes] + list(profile.decode):
        for dtype in profile.dtypes:
            for layout in profile.layouts:
                for rd in (d, d // 2) if profile.partial else (d,):
                    cases.append(RotaryCase(b, h, length, d, dtype, layout, rd, offset))
    return cases


def _hf_rotary(case: RotaryCase, x, positions):
    """transformers' Llama rotation at its best: cos/sin built once, as LlamaRotaryEmbedding does.

    ``apply_rotary_pos_emb`` rotates q and k in one call; it gets ``q = k = x`` and the caller
    halves the time. Partial rotary splits and concatenates as transformers' GPT-NeoX/Phi do.
    """
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: F401 - a missing peer fails here

    rd = case.rotary_dim
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    freqs = positions[None, :, None].float() * inv_freq  # (1, L, rd/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (1, L, rd)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def run(t):
        return _hf_rotate(t, cos, sin, rd)

    return run


def _hf_rotate(t, cos, sin, rd: int):
    """transformers' ``apply_rotary_pos_emb`` on q = k = ``t``, rotating the first ``rd`` dims
    (partial rotary as its models do: rotate a slice, concatenate the rest)."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    if rd == t.shape[-1]:
        return apply_rotary_pos_emb(t, t, cos, sin)
    rot, rest = t[..., :rd], t[..., rd:]
    q, k = apply_rotary_pos_emb(rot, rot, cos, sin)
    return torch.cat((q, rest), dim=-1), torch.cat((k, rest), dim=-1)


def _hf_step(case: RotaryCase, x, positions):
    """A decoding step in transformers: ``LlamaRotaryEmbedding`` turns the position ids into cos/sin
    (once per step, for q and k), then ``apply_rotary_pos_emb`` rotates q and k (``q = k = x``)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rd = case.rotary_dim
    emb = LlamaRotaryEmbedding(config=LlamaConfig(hidden_size=case.heads * rd, num_attention_heads=case.heads,
                                                  head_dim=rd))
    position_ids = positions.expand(case.batch, -1)  # (B, L)

    def run(t):
        cos, sin = emb(t, position_ids)
        return _hf_rotate(t, cos, sin, rd)

    return run


def _ret_rotary(case: RotaryCase, x):
    """rotary-embedding-torch (interleaved pairs only), its frequency cache warmed by one call."""
    from rotary_embedding_torch import RotaryEmbedding

    rope = RotaryEmbedding(dim=case.rotary_dim, cache_max_seq_len=max(8192, case.offset + case.length))
    rope.rotate_queries_or_keys(x, offset=case.offset)
    return lambda t: rope.rotate_queries_or_keys(t, offset=case.offset)


BASELINES = ("copy_", "clone")
PAIRED = ("transformers", "transformers_step", "posenc_step")  # candidates that rotate q and k in one call: timed on both, halved


def _rotary_candidates(case: RotaryCase, x, positions) -> tuple[dict[str, Callable], dict[str, str], Callable]:
    """Functions ``x -> out``, the reasons for missing peers, and posenc's cos/sin alone."""
    import torch

    import posenc
    from posenc.rotary import apply_rotary

    pe = posenc.build({"scheme": "rope", "head_dim": case.head_dim, "rotary_dim": case.rotary_dim,
                       "layout": case.layout})
    cos, sin = pe.cos_sin(positions, x.dtype)  # (L, rd/2)
    warm = torch.empty_like(x)  # one preallocated output, written by every call: no allocation
    fns: dict[str, Callable] = {
        "copy_": lambda t: warm.copy_(t),
        "clone": lambda t: t.clone(),
        "posenc": lambda t: pe(t, positions),
        "posenc_apply": lambda t: apply_rotary(t, cos, sin, layout=case.layout),
        "posenc_out": lambda t: apply_rotary(t, cos, sin, layout=case.layout, out=warm),
    }
    missing: dict[str, str] = {}
    if case.offset:  # a decoding step: the rope module on q and on k (each finds its own cos/sin)
        fns["posenc_step"] = lambda t: (pe(t, positions), pe(t, positions))
    peers = {"transformers": ("half", lambda: _hf_rotary(case, x, positions)),
             "rotary_embedding_torch": ("interleaved", lambda: _ret_rotary(case, x))}
    if case.offset:
        peers["transformers_step"] = ("half", lambda: _hf_step(case, x, positions))
    for name, (layout, make) in peers.items():
        if case.layout != layout:
            missing[name] = f"n/a ({layout} layout only)"
            continue
        try:
            fns[name] = make()
        except ImportError as e:
            missing[name] = f"not installed ({e.name})"
    return fns, missing, lambda: pe.cos_sin(positions, x.dtype)


def _forward_backward(fn: Callable, x, grad) -> Callable[[], object]:
    """One forward and the backward to ``x`` (``autograd.grad``: nothing accumulates)."""
    import torch

    def run():
        out = fn(x)
        outs = list(out) if isinstance(out, tuple) else [out]
        return torch.autograd.grad(outs, x, [grad] * len(outs))

    return run


def bench_rotary_case(case: RotaryCase, profile: Profile) -> dict:
    """Median forward and forward+backward times of every candidate on one case."""
    import torch

    torch.manual_seed(0)
    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.batch, case.heads, case.length, case.head_dim, dtype=dtype)  # (B, H, L, D)
    positions = torch.arange(case.length) + case.offset
    fns, missing, cos_sin = _rotary_candidates(case, x, positions)
    forward = {n: (lambda f=f: f(x)) for n, f in fns.items()}
    forward["posenc_cos_sin"] = cos_sin
    xg, grad = x.detach().requires_grad_(True), torch.randn_like(x)
    backward = {n: _forward_backward(f, xg, grad) for n, f in fns.items() if n not in BASELINES + ("posenc_out",)}
    warm_x, warm_g = torch.empty_like(x), torch.empty_like(x)
    backward["copy_"] = lambda: (warm_x.copy_(x), warm_g.copy_(grad))  # the forward's and the gradient's
    backward["clone"] = lambda: (x.clone(), grad.clone())
    times = {}
    for pass_, candidates in (("forward", forward), ("forward+backward", backward)):
        times[pass_] = time_interleaved(candidates, repeats=profile.repeats, min_sample_s=profile.min_sample_s)
        for name in PAIRED:
            if name in times[pass_]:
                times[pass_][name] /= 2
    expect = fns["posenc"](x).float()
    diffs = {}
    for name, f in fns.items():
        if name not in BASELINES + ("posenc",):
            out = f(x)
            diffs[name] = float(((out[0] if isinstance(out, tuple) else out).float() - expect).abs().max())
    return {"case": asdict(case), "label": case.label, "bytes": x.numel() * x.element_size(),
            "seconds": times, "missing": missing, "max_abs_diff_vs_posenc": diffs}


# -- attention --------------------------------------------------------------------------------

def peak_rss_gb() -> float:
    """This process's peak resident memory so far, GiB.

    Linux's ``VmHWM`` where it exists: the ``getrusage().ru_maxrss`` of a child also counts the
    RSS its parent had when it forked (the kernel keeps the larger at ``exec``), so it would
    report the benchmark's own memory, not the case's. Elsewhere ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB -> GiB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


def attention_child(spec: dict) -> dict:
    """Runs one attention case in this (fresh) process: seconds and peak RSS in GiB."""
    if spec.get("memory_cap_gb"):
        import resource

        cap = int(spec["memory_cap_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import torch

    import posenc

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    after_import = peak_rss_gb()
    torch.manual_seed(0)
    h, length, d = spec["heads"], spec["length"], spec["head_dim"]
    train = spec.get("pass", "forward") == "forward+backward"
    q, k, v = (torch.randn(1, h, length, d, requires_grad=train) for _ in range(3))  # (B, H, L, D)
    grad = torch.randn(1, h, length, d) if train else None
    after_inputs = peak_rss_gb()
    if spec["method"] == "sdpa_floor":
        def forward():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        pe = posenc.build({"scheme": spec["scheme"], "num_heads": h})
        backend = {"posenc": "auto", "blockwise": "blockwise"}.get(spec["method"], "materialize")

        def forward():
            return posenc.attention(q, k, v, pe, causal=True, backend=backend)

    def call():
        if not train:
            with torch.no_grad():
                return forward()
        forward().backward(grad)  # gradients of q, k, v and the scheme's parameters

    times = []
    with torch.no_grad():
        for n in spec.get("warm_lengths", ()):  # dynamo's cache warmed by other shapes first, as in a loop
            posenc.attention(q[:, :, :n], k[:, :, :n], v[:, :, :n], pe, causal=True, backend="flex")
    for _ in range(1 + spec["repeats"]):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {"first_s": times[0], "seconds": statistics.median(times[1:] or times),
            "rss_after_import_gb": after_import, "rss_after_inputs_gb": after_inputs,
            "peak_rss_gb": peak_rss_gb()}


def run_attention_case(spec: dict, timeout: float = 900.0) -> dict:
    """``attention_child(spec)`` in a fresh interpreter; an error or a timeout is reported, not raised."""
    code = ("import json, sys; from posenc.speed import attention_child; "
            "print(json.dumps(attention_child(json.loads(sys.argv[1]))))")
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {**spec, "error": last[:200]}
    return {**spec, **json.loads(proc.stdout.strip().splitlines()[-1])}


WARM_LENGTHS = tuple(range(64, 64 + 9 * 13, 13))  # 9 distinct lengths: past dynamo's limit of 8 per code object
TRAIN_LIMIT = 32768  # forward+backward cases at lengths given explicitly: up to the goals' largest


def attention_specs(profile: Profile, threads: int | None = None, *, lengths: tuple[int, ...] | None = None,
                    schemes: tuple[str, ...] | None = None) -> list[dict]:
    """The floor, then each scheme through posenc (auto, and blockwise) and (where it fits) a
    materialized map; forward, then forward+backward at the lengths up to ``train_max``.

    ``lengths``/``schemes`` replace the profile's (``posenc bench --lengths/--schemes``); given
    lengths get forward+backward cases up to ``TRAIN_LIMIT``. posenc's
    auto backend for a forward is FlexAttention at these sizes: each such case first calls it at the
    ``WARM_LENGTHS`` (more distinct lengths than dynamo's recompile limit, as a training loop with
    variable lengths would), then times its own length: the first call, and the median of
    ``attention_repeats`` later calls; the others have nothing to compile and are timed once.
    """
    specs = []
    base = {"heads": profile.heads, "head_dim": profile.head_dim, "repeats": 0, "threads": threads,
            "memory_cap_gb": profile.memory_cap_gb}
    for length in profile.lengths if lengths is None else lengths:
        fwd = {**base, "pass": "forward", "length": length}
        specs.append({**fwd, "scheme": "none", "method": "sdpa_floor"})
        for scheme in profile.schemes if schemes is None else schemes:
            specs.append({**fwd, "scheme": scheme, "method": "posenc", "repeats": profile.attention_repeats,
                          "warm_lengths": WARM_LENGTHS})
            specs.append({**fwd, "scheme": scheme, "method": "blockwise"})
            if length <= profile.materialize_max:
                specs.append({**fwd, "scheme": scheme, "method": "materialized"})
        if length > (profile.train_max if lengths is None else TRAIN_LIMIT):
            continue
        train = {**base, "pass": "forward+backward", "length": length}
        specs.append({**train, "scheme": "none", "method": "sdpa_floor"})
        for scheme in profile.train_schemes if schemes is None else schemes:
            specs.append({**train, "scheme": scheme, "method": "posenc"})  # auto: blockwise at length
    return specs


# -- the run and its tables -------------------------------------------------------------------

@dataclass
class Result:
    profile: str
    meta: dict = field(default_factory=dict)
    rotary: list[dict] = field(default_factory=list)
    rotary_goals: dict = field(default_factory=dict)  # rotary_goals(rotary)
    attention: list[dict] = field(default_factory=list)


def environment() -> dict:
    """What the numbers depend on: versions, CPUs, threads, load."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    versions = {}
    for dist in ("torch", "transformers", "rotary-embedding-torch", "numpy"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "load_avg": list(os.getloadavg()), **versions}


def run(what: tuple[str, ...] = WHATS, profile_name: str = "full", *, threads: int | None = None,
        progress: Callable[[str], None] | None = None, lengths: tuple[int, ...] | None = None,
        schemes: tuple[str, ...] | None = None) -> Result:
    """Runs the benchmark. ``threads`` sets torch's intra-op threads (default: torch's own);
    ``progress`` gets one line per finished case; ``lengths``/``schemes`` replace the profile's
    attention lengths and schemes."""
    import torch

    profile = PROFILES[profile_name]
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    say = progress or (lambda line: None)
    try:
        result = Result(profile=profile_name, meta={**environment(), "profile": asdict(profile)})
        if "rotary" in what:
            for case in rotary_cases(profile):
                result.rotary.append(bench_rotary_case(case, profile))
                say(f"{time.perf_counter() - start:6.1f} s  rotary {case.label}")
            result.rotary_goals = rotary_goals(result.rotary)
        if "attention" in what:
            for spec in attention_specs(profile, threads, lengths=lengths, schemes=schemes):
                result.attention.append(run_attention_case(spec))
                say(f"{time.perf_counter() - start:6.1f} s  attention {spec['pass']} {spec['scheme']} "
                    f"{spec['method']} L={spec['length']}")
    finally:
        torch.set_num_threads(before)
    result.meta["load_avg_end"] = list(os.getloadavg())
    result.meta["wall_s"] = time.perf_counter() - start
    return result


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def rotary_table(rows: list[dict]) -> str:
    """One line per case and pass: times in ms, then the ratios the goals are stated in.

    ``out/cp_`` = ``apply_rotary(out=)`` ÷ ``copy_`` into warm memory (the roofline);
    ``ap/cl`` = allocating ``apply_rotary`` ÷ ``clone()`` (the cost of allocation);
    ``HF/pe``, ``RET/pe`` = peer ÷ posenc's module forward (> 1: posenc is faster);
    ``HFst/st`` = transformers' decoding step ÷ posenc's (per tensor; > 1: posenc is faster).
    """
    head = (f"{'case':<34} {'pass':<7} {'copy_':>7} {'clone':>7} {'out=':>7} {'apply':>7} {'module':>7} "
            f"{'cos/sin':>7} {'HF':>7} {'RET':>7} {'step':>7} {'HFstep':>7} {'out/cp_':>7} {'ap/cl':>6} {'HF/pe':>6} "
            f"{'RET/pe':>6} {'HFst/st':>7}")
    lines = [head, "-" * len(head)]
    for row in rows:
        for pass_, t in row["seconds"].items():
            short = "fwd" if pass_ == "forward" else "fwd+bwd"
            pe = t.get("posenc")
            lines.append(
                f"{row['label']:<34} {short:<7} {_ms(t.get('copy_')):>7} {_ms(t.get('clone')):>7} "
                f"{_ms(t.get('posenc_out')):>7} {_ms(t.get('posenc_apply')):>7} {_ms(pe):>7} "
                f"{_ms(t.get('posenc_cos_sin')):>7} {_ms(t.get('transformers')):>7} "
                f"{_ms(t.get('rotary_embedding_torch')):>7} {_ms(t.get('posenc_step')):>7} "
                f"{_ms(t.get('transformers_step')):>7} {_ratio(t.get('posenc_out'), t.get('copy_')):>7} "
                f"{_ratio(t.get('posenc_apply'), t.get('clone')):>6} {_ratio(t.get('transformers'), pe):>6} "
                f"{_ratio(t.get('rotary_embedding_torch'), pe):>6} "
                f"{_ratio(t.get('transformers_step'), t.get('posenc_step')):>7}")
    return "\n".join(lines)


ROTARY_GOALS = {
    # name: (numerator, denominator, bound, "<=" or ">=", which cases, what it says)
    "out_vs_copy_": ("posenc_out", "copy_", 1.5, "<=", "prefill",
                     "apply_rotary(out=) within 1.5x of copy_ into warm memory"),
    "alloc_vs_clone": ("posenc_apply", "clone", 1.2, "<=", "prefill",
                       "allocating apply_rotary within 1.2x of clone()"),
    "vs_transformers": ("transformers", "posenc", 2.0, ">=", "prefill",
                        "rope module at least 2x faster than transformers' apply_rotary_pos_emb"),
    "decode_vs_transformers": ("transformers_step", "posenc_step", 1.0, ">=", "decode",
                               "decoding step (q and k, cos/sin from positions): posenc no slower than "
                               "transformers"),
}


def rotary_goals(rows: list[dict]) -> dict[str, dict]:
    """Each goal of ``ROTARY_GOALS`` on the forward pass: the worst ratio over its cases and whether it holds."""
    goals = {}
    for name, (num, den, bound, sense, cases, what) in ROTARY_GOALS.items():
        ratios = {}
        for row in rows:
            if (row["case"]["offset"] > 0) != (cases == "decode"):
                continue
            t = row["seconds"]["forward"]
            if t.get(num) is not None and t.get(den) is not None:
                ratios[row["label"]] = t[num] / t[den]
        if not ratios:
            goals[name] = {"what": what, "measured": False}
            continue
        worst = (max if sense == "<=" else min)(ratios, key=ratios.get)
        ok = [r <= bound if sense == "<=" else r >= bound for r in ratios.values()]
        goals[name] = {"what": what, "measured": True, "met": all(ok), "cases_met": sum(ok),
                       "cases": len(ok), "worst_case": worst, "worst_ratio": ratios[worst],
                       "ratio": f"{num} / {den}", "bound": f"{sense} {bound}"}
    return goals


def rotary_goal_lines(rows: list[dict]) -> list[str]:
    lines = []
    for g in rotary_goals(rows).values():
        if not g["measured"]:
            lines.append(f"goal: {g['what']}: not measured in this profile")
            continue
        lines.append(f"goal: {g['what']}: {'met' if g['met'] else 'NOT met'} ({g['cases_met']} of {g['cases']} "
                     f"cases within; forward; {g['ratio']} {g['bound']}; worst {g['worst_ratio']:.2f} at "
                     f"{g['worst_case']})")
    return lines


def _pass(row: dict) -> str:
    return row.get("pass", "forward")


def attention_table(rows: list[dict]) -> str:
    """One line per pass, scheme, method and length: time, first call, peak RSS and its baselines."""
    head = (f"{'pass':<7} {'scheme':<6} {'method':<12} {'L':>6} {'time s':>8} {'1st s':>7} {'peak GB':>8} "
            f"{'import GB':>9} {'inputs GB':>9} {'x floor':>7}")
    lines = [head, "-" * len(head)]
    floor = {(_pass(r), r["length"]): r.get("seconds") for r in rows if r["method"] == "sdpa_floor"}
    for r in rows:
        short = "fwd" if _pass(r) == "forward" else "fwd+bwd"
        if "error" in r:
            lines.append(f"{short:<7} {r['scheme']:<6} {r['method']:<12} {r['length']:>6} error: {r['error']}")
            continue
        lines.append(f"{short:<7} {r['scheme']:<6} {r['method']:<12} {r['length']:>6} {r['seconds']:>8.3f} "
                     f"{r['first_s']:>7.2f} {r['peak_rss_gb']:>8.2f} {r['rss_after_import_gb']:>9.2f} "
                     f"{r['rss_after_inputs_gb']:>9.2f} {_ratio(r['seconds'], floor.get((_pass(r), r['length']))):>7}")
    return "\n".join(lines)


def report(result: Result) -> str:
    """The tables ``posenc bench`` prints."""
    meta = result.meta
    parts = [f"posenc bench ({result.profile}): torch {meta.get('torch')}, {meta.get('torch_threads')} threads, "
             f"{meta.get('cpus')} CPUs, load {meta['load_avg'][0]:.2f} -> {meta['load_avg_end'][0]:.2f}, "
             f"{meta['wall_s']:.0f} s"]
    if max(meta["load_avg"][0], meta["load_avg_end"][0]) > (meta.get("cpus") or 1):
        parts.append("warning: the load exceeds the CPUs; other processes compete, so compare the "
                     "ratios within this run, not the times")
    if result.rotary:
        parts += ["", "Rotary, median ms per tensor. Baselines: copy_ = out.copy_(x) into a warm preallocated "
                  "tensor (the roofline: out= is divided by it), clone = x.clone() (fresh memory: the "
                  "allocating apply is divided by it). out= / apply = posenc.apply_rotary into a warm "
                  "tensor / allocating, cos/sin given; module = the rope module from positions; HF = "
                  "transformers apply_rotary_pos_emb (cos/sin precomputed), RET = rotary-embedding-torch; "
                  "HF/pe > 1: posenc's module is faster; step / HFstep = a decoding step's rotary work "
                  "per tensor (posenc: the module on q and k; transformers: LlamaRotaryEmbedding from "
                  "position ids, then apply_rotary_pos_emb on q and k):",
                  rotary_table(result.rotary), *rotary_goal_lines(result.rotary)]
        missing = {f"{k}: {v}" for r in result.rotary for k, v in r["missing"].items() if "n/a" not in v}
        parts += [f"missing peer: {m}" for m in sorted(missing)]
    if result.attention:
        parts += ["", "Attention, causal float32, B=1, 8 heads, head_dim 64, fresh process per case (peak = "
                  "VmHWM, with the interpreter and q/k/v; fwd posenc: auto (flex) after 9 calls at other lengths, "
                  "time after its compiling first call; fwd+bwd posenc: auto (blockwise), gradients of q, k, v and "
                  "the parameters):",
                  attention_table(result.attention)]
        parts += [goal_line(result.attention), *training_goal_lines(result.attention)]
    return "\n".join(parts)


GOAL_LENGTH, GOAL_PEAK_GB = 32768, 1.5


def goal_line(rows: list[dict]) -> str:
    """The issue's goal: ALiBi and T5 forward at L=32768 under 1.5 GB peak RSS on CPU."""
    peaks = {r["scheme"]: r.get("peak_rss_gb") for r in rows
             if r["method"] == "posenc" and r["length"] == GOAL_LENGTH and _pass(r) == "forward"}
    if not peaks:
        return f"goal (L={GOAL_LENGTH} under {GOAL_PEAK_GB} GB): not measured in this profile"
    met = all(p is not None and p < GOAL_PEAK_GB for p in peaks.values())
    shown = ", ".join(f"{k} {'error' if p is None else f'{p:.2f} GB'}" for k, p in peaks.items())
    return f"goal (L={GOAL_LENGTH} under {GOAL_PEAK_GB} GB peak): {'met' if met else 'NOT met'}: {shown}"


# Issue 10's goals: (pass, length, what, bound); a bound on the peak in GB, on seconds, or on the
# time as a multiple of the floor (causal SDPA without a bias, same pass and length).
TRAINING_GOALS = (
    ("forward+backward", 8192, "peak_gb", 2.0),
    ("forward+backward", 32768, "peak_gb", 4.0),
    ("forward+backward", 8192, "alibi_seconds", 22.0),
    ("forward", 131072, "peak_gb", 3.0),
    ("forward", 32768, "x_floor", 2.0),
)


def training_goal_lines(rows: list[dict]) -> list[str]:
    """One line per goal of issue 10 (bias attention that trains at length; long forward): met,
    NOT met, or not measured, with the numbers. A forward goal counts the faster of posenc's
    methods (auto, blockwise) per scheme; fwd+bwd counts posenc's auto."""
    lines = []
    for pass_, length, what, bound in TRAINING_GOALS:
        cases = [r for r in rows if _pass(r) == pass_ and r["length"] == length
                 and r["method"] in (("posenc", "blockwise") if pass_ == "forward" else ("posenc",))]
        if what == "alibi_seconds":
            cases = [r for r in cases if r["scheme"] == "alibi"]
        label = f"goal ({'fwd' if pass_ == 'forward' else 'fwd+bwd'} L={length}, " + {
            "peak_gb": f"peak under {bound} GB", "alibi_seconds": f"ALiBi under {bound} s",
            "x_floor": f"under {bound}x causal SDPA"}[what] + ")"
        if not cases:
            lines.append(f"{label}: not measured in this run")
            continue
        floor = next((r.get("seconds") for r in rows if r["method"] == "sdpa_floor" and _pass(r) == pass_
                      and r["length"] == length), None)
        best: dict[str, float | None] = {}
        for r in cases:
            value = {"peak_gb": r.get("peak_rss_gb"), "alibi_seconds": r.get("seconds"),
                     "x_floor": None if floor is None or "seconds" not in r else r["seconds"] / floor}[what]
            old = best.get(r["scheme"])
            best[r["scheme"]] = value if old is None else (old if value is None else min(old, value))
        met = all(x is not None and x <= bound for x in best.values())
        shown = ", ".join(f"{k} {'error' if x is None else f'{x:.2f}'}" for k, x in best.items())
        lines.append(f"{label}: {'met' if met else 'NOT met'}: {shown}")
    return lines
