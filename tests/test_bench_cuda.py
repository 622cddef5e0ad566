"""``posenc bench --device cuda``: the device option, the synchronized timing, the CUDA-only peers
(Liger-Kernel, flash-attn) and what the meta records. This machine may have no GPU, so most tests
run on the CPU: the peers as stand-ins that check the calling conventions read in the peers'
sources and rotate by their documented formulas, CUDA as monkeypatched answers; the last test runs
the command end to end where a GPU is present and is skipped elsewhere."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import time
import types

import pytest
import torch

from posenc.bench import Result
from posenc.bench import rotary as bench_rotary
from posenc.bench.profiles import PROFILES, Profile
from posenc.bench.rotary import RotaryCase, bench_rotary_case, rotary_cases
from posenc.bench.tables import rotary_table
from posenc.bench.timing import time_interleaved
from posenc.cli import main
from posenc.commands import bench as command

# rotary only: one prefill shape, one decoding step and, on CUDA, one more shape
TINY = Profile(shapes=((1, 2, 17, 8),), decode=((2, 2, 1, 8, 40),), repeats=1, min_sample_s=0.0,
               cuda_shapes=((1, 3, 33, 16),))
FAST = Profile(shapes=(), decode=(), repeats=1, min_sample_s=0.0)  # for bench_rotary_case alone
TINY_CASES = [RotaryCase(2, 3, 17, 16, "float32", "half", 16), RotaryCase(2, 3, 17, 16, "float32", "half", 8),
              RotaryCase(2, 3, 17, 16, "bfloat16", "interleaved", 8),
              RotaryCase(2, 3, 1, 16, "float32", "half", 16, 40),  # decoding steps at position 40
              RotaryCase(2, 3, 1, 16, "float32", "interleaved", 8, 40)]


def _fake_cuda(monkeypatch, count: int = 2) -> None:
    """torch answers as if ``count`` CUDA devices were present (nothing is run on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


# -- the command line -------------------------------------------------------------------------

def test_device_cuda_without_cuda_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--device", "cuda", "--what", "rotary"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("posenc bench: error: --device cuda: no CUDA device is available")


@pytest.mark.parametrize("value,message", [
    ("gpu", "--device must be cpu, cuda or cuda:N; got 'gpu'"),
    ("cuda:", "--device must be cpu, cuda or cuda:N; got 'cuda:'"),
    ("cuda:x", "--device must be cpu, cuda or cuda:N; got 'cuda:x'"),
    ("CPU", "--device must be cpu, cuda or cuda:N; got 'CPU'"),
    ("cuda:2", "--device cuda:2: no such CUDA device (2 available: cuda:0 to cuda:1)"),
])
def test_bad_devices_exit_2_with_one_line(value, message, monkeypatch, capsys):
    _fake_cuda(monkeypatch, count=2)
    assert main(["bench", "--device", value]) == 2
    assert capsys.readouterr().err == f"posenc bench: error: {message}\n"


def test_attention_on_cuda_is_refused_with_one_line(monkeypatch, capsys):
    _fake_cuda(monkeypatch)
    assert main(["bench", "--device", "cuda:1", "--what", "rotary,attention"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("posenc bench: error: --what attention runs on cpu only")
    with pytest.raises(ValueError, match="attention runs on cpu only, not on 'cuda'"):
        from posenc.bench import run

        run(("attention",), "quick", device="cuda")


@pytest.mark.parametrize("argv,device,what", [
    ([], "cpu", ("rotary", "attention")),
    (["--device", "cpu", "--what", "attention"], "cpu", ("attention",)),
    (["--device", "cuda"], "cuda", ("rotary",)),  # attention runs on the CPU only: not a default there
    (["--device", "cuda:1", "--what", "rotary"], "cuda:1", ("rotary",)),
])
def test_device_and_what_reach_the_run(argv, device, what, monkeypatch, capsys):
    _fake_cuda(monkeypatch, count=2)
    seen = {}

    def fake_run(what_, profile_name, **kw):
        seen.update(what=what_, profile=profile_name, **kw)
        return Result(profile=profile_name, meta={"load_avg": [0.0] * 3, "load_avg_end": [0.0] * 3, "wall_s": 0.0})

    monkeypatch.setattr("posenc.bench.run", fake_run)
    assert main(["bench", "--quick", *argv]) == 0
    assert (seen["device"], seen["what"], seen["profile"]) == (device, what, "quick")
    assert command._device(device) == device


# -- timing -----------------------------------------------------------------------------------

def test_each_sample_is_synchronized_before_its_clock_starts_and_stops():
    log = []
    fns = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    times = time_interleaved(fns, repeats=3, min_sample_s=0.0, synchronize=lambda: log.append("sync"))
    assert set(times) == {"a", "b"}
    warmup, samples = log[:8], log[8:]
    assert warmup == ["a", "sync", "a", "sync", "b", "sync", "b", "sync"]  # the second call, timed alone, too
    # one call per sample (min_sample_s=0), each between two synchronizations, rounds rotated
    assert samples == ["sync", "a", "sync", "sync", "b", "sync",
                       "sync", "b", "sync", "sync", "a", "sync",
                       "sync", "a", "sync", "sync", "b", "sync"]
    log.clear()
    time_interleaved(fns, repeats=3, min_sample_s=0.0)  # the CPU: nothing but the calls
    assert log == ["a", "a", "b", "b", "a", "b", "b", "a", "a", "b"]


def test_cuda_runs_synchronize_on_the_device_and_the_cpu_does_not(monkeypatch):
    assert bench_rotary._synchronize(torch.device("cpu")) is None
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    bench_rotary._synchronize(torch.device("cuda:1"))()
    assert calls == [torch.device("cuda:1")]


def test_cuda_runs_add_the_shapes_past_the_l2_cache():
    cpu, cuda = rotary_cases(TINY), rotary_cases(TINY, "cuda:0")
    assert len(cpu) == 16 and len(cuda) == 24
    assert {(c.batch, c.heads, c.length, c.head_dim) for c in cuda} - {(c.batch, c.heads, c.length, c.head_dim)
                                                                         for c in cpu} == {(1, 3, 33, 16)}
    b, h, length, d = PROFILES["quick"].cuda_shapes[0]
    assert b * h * length * d * 2 > 126e6  # x alone, in bf16, is larger than a B200's 126 MB of L2


# -- the CUDA-only peers, as stand-ins on the CPU ---------------------------------------------

def _reference(x, positions, rd, layout):
    """The rotation in float64 from the angles themselves: pair (i, i + R) or (2i, 2i + 1) by
    angle position · 10000^(−2i/rd)."""
    r = rd // 2
    theta = positions.double()[:, None] * 10000.0 ** (-torch.arange(r, dtype=torch.float64) * 2 / rd)  # (L, R)
    cos, sin = theta.cos(), theta.sin()
    x = x.double()
    if layout == "half":
        a, b = x[..., :r], x[..., r:rd]
        rot = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        rot = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    return torch.cat((rot, x[..., rd:]), dim=-1)


def _rotate_halves(t, cos, sin):
    """Pairs (i, i + R) of the first 2R = cos.shape[-1] dims, cos/sin [1, L, 2R] with repeated halves."""
    rd = cos.shape[-1]
    r, c, s = rd // 2, cos[:, None], sin[:, None]  # (1, 1, L, rd)
    a, b = t[..., :r], t[..., r:rd]
    return torch.cat((a * c[..., :r] - b * s[..., :r], b * c[..., r:] + a * s[..., r:], t[..., rd:]), dim=-1)


class _FakeLigerRope(torch.autograd.Function):
    """Liger-Kernel's ``LigerRopeFunction`` as read in liger-kernel 0.8.5: q, k [B, H, L, D] (as
    views of [B, L, H, D] memory, which it rotates in place), cos/sin [1 or B, L, rotary_dim] with
    repeated halves, of q's dtype; rotates the first cos.shape[-1] dims of q and k."""

    calls: list = []

    @staticmethod
    def forward(ctx, q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
        b, h, length, d = q.shape
        assert k.shape == q.shape and q.transpose(1, 2).is_contiguous() and k.transpose(1, 2).is_contiguous()
        assert q.data_ptr() != k.data_ptr()
        assert cos.shape == sin.shape and cos.dim() == 3 and cos.shape[0] in (1, b) and cos.shape[1] == length
        rd = cos.shape[-1]
        assert torch.equal(cos[..., : rd // 2], cos[..., rd // 2:]) and cos.dtype == q.dtype
        _FakeLigerRope.calls.append(rd)
        ctx.save_for_backward(cos, sin)
        return _rotate_halves(q, cos, sin), _rotate_halves(k, cos, sin)

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        return _rotate_halves(dq, cos, -sin), _rotate_halves(dk, cos, -sin), None, None, None, None, None


def _fake_flash_apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                                 cu_seqlens=None, max_seqlen=None):
    """flash-attn's ``apply_rotary_emb`` as read in its 2.8 sources: x [B, L, H, D], cos/sin
    [rows, rotary_dim/2] of x's dtype, token l at row l + seqlen_offsets (an int here)."""
    b, length, h, d = x.shape
    assert x.is_contiguous() and cos.is_contiguous() and cos.shape == sin.shape and cos.dim() == 2
    assert x.dtype == cos.dtype == sin.dtype and not inplace and cu_seqlens is None
    assert isinstance(seqlen_offsets, int) and seqlen_offsets + length <= cos.shape[0]
    _fake_flash_apply_rotary_emb.calls.append((interleaved, seqlen_offsets))
    c = cos[seqlen_offsets: seqlen_offsets + length][:, None]  # (L, 1, R)
    s = sin[seqlen_offsets: seqlen_offsets + length][:, None]
    rd = 2 * cos.shape[-1]
    if interleaved:
        a, bb = x[..., 0:rd:2], x[..., 1:rd:2]
        rot = torch.stack((a * c - bb * s, bb * c + a * s), dim=-1).flatten(-2)
    else:
        a, bb = x[..., : rd // 2], x[..., rd // 2: rd]
        rot = torch.cat((a * c - bb * s, bb * c + a * s), dim=-1)
    return torch.cat((rot, x[..., rd:]), dim=-1)


_fake_flash_apply_rotary_emb.calls = []


def _install(monkeypatch, modules: dict[str, dict]) -> None:
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)


def _import_transformers() -> None:
    """Before the peers are replaced: transformers looks for flash_attn when it is first imported."""
    try:
        import transformers.models.llama.modeling_llama  # noqa: F401
    except ImportError:
        pass


@pytest.fixture
def stand_in_peers(monkeypatch):
    """Liger-Kernel and flash-attn as stand-ins, built for CPU tensors."""
    _import_transformers()
    monkeypatch.setattr(bench_rotary, "CUDA_ONLY_ON_CPU", True)
    _FakeLigerRope.calls, _fake_flash_apply_rotary_emb.calls = [], []
    _install(monkeypatch, {"liger_kernel": {}, "liger_kernel.ops": {},
                           "liger_kernel.ops.rope": {"LigerRopeFunction": _FakeLigerRope},
                           "flash_attn": {}, "flash_attn.layers": {},
                           "flash_attn.layers.rotary": {"apply_rotary_emb": _fake_flash_apply_rotary_emb}})


@pytest.mark.parametrize("case", TINY_CASES, ids=lambda c: c.label)
def test_the_cuda_peers_are_called_as_their_sources_say(case, stand_in_peers):
    row = bench_rotary_case(case, FAST)
    fwd, bwd = row["seconds"]["forward"], row["seconds"]["forward+backward"]
    assert "flash_attn" in fwd and "flash_attn" in bwd
    assert ("liger_kernel" in fwd and "liger_kernel" in bwd) == (case.layout == "half")
    if case.layout != "half":
        assert row["missing"]["liger_kernel"] == "n/a (half layout only)"
    assert {(case.layout == "interleaved", case.offset)} == set(_fake_flash_apply_rotary_emb.calls)
    assert set(_FakeLigerRope.calls) <= {case.rotary_dim}
    tol = 1e-5 if case.dtype == "float32" else 0.05
    for name in ("flash_attn", "liger_kernel") if case.layout == "half" else ("flash_attn",):
        assert row["max_abs_diff_vs_posenc"][name] < tol, name  # the same rotation as posenc's


@pytest.mark.parametrize("case", TINY_CASES, ids=lambda c: c.label)
def test_the_peers_rotate_at_the_right_positions(case, stand_in_peers):
    """The adapters themselves against the float64 rotation at positions offset..offset+L-1 (not
    only against posenc): flash-attn's table rows and offset, Liger's repeated halves, the layouts."""
    import posenc
    from posenc.bench.peers import INPUT_LAYOUTS, _flash_rotary, _liger_rotary

    torch.manual_seed(1)
    x = torch.randn(case.batch, case.heads, case.length, case.head_dim)
    positions = torch.arange(case.length) + case.offset
    pe = posenc.build({"scheme": "rope", "head_dim": case.head_dim, "rotary_dim": case.rotary_dim,
                       "layout": case.layout})
    expect = _reference(x, positions, case.rotary_dim, case.layout)
    into, back = INPUT_LAYOUTS["flash_attn"]
    flash = _flash_rotary(case, *pe.cos_sin(torch.arange(case.offset + case.length), x.dtype))
    assert (back(flash(into(x))).double() - expect).abs().max() < 1e-5
    if case.layout == "half":
        into, back = INPUT_LAYOUTS["liger_kernel"]
        liger = _liger_rotary(case, x, *pe.cos_sin(positions, x.dtype))
        q = into(x)
        assert q.data_ptr() != x.data_ptr()  # the in-place peer gets its own copy, even at L = 1
        assert (back(liger(q)[0]).double() - expect).abs().max() < 1e-5


def test_a_liger_kernel_without_rotary_dim_is_not_applicable_to_partial_rotary(stand_in_peers, monkeypatch):
    class OldLiger(_FakeLigerRope):  # releases before rotary_dim rotated whole heads
        @staticmethod
        def forward(ctx, q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            return _FakeLigerRope.forward(ctx, q, k, cos, sin)

    monkeypatch.setattr(sys.modules["liger_kernel.ops.rope"], "LigerRopeFunction", OldLiger)
    full, partial = bench_rotary_case(TINY_CASES[0], FAST), bench_rotary_case(TINY_CASES[1], FAST)
    assert "liger_kernel" in full["seconds"]["forward"] and "liger_kernel" not in partial["seconds"]["forward"]
    assert partial["missing"]["liger_kernel"] == "n/a (this liger-kernel rotates whole heads only)"


class _Blocked:
    """An import finder under which the named top-level packages are not installed."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_a_missing_cuda_peer_is_reported_not_raised(monkeypatch):
    _import_transformers()
    monkeypatch.setattr(bench_rotary, "CUDA_ONLY_ON_CPU", True)
    for name in [m for m in sys.modules if m.split(".")[0] in ("liger_kernel", "flash_attn")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Blocked({"liger_kernel", "flash_attn"}), *sys.meta_path])
    row = bench_rotary_case(TINY_CASES[0], FAST)
    assert row["missing"]["liger_kernel"] == "not installed (liger_kernel)"
    assert row["missing"]["flash_attn"] == "not installed (flash_attn)"
    assert {"posenc", "posenc_apply", "posenc_out", "copy_"} <= set(row["seconds"]["forward"])


def test_the_table_shows_the_cuda_peers_where_they_ran():
    seconds = {"copy_": 1e-3, "clone": 1e-3, "posenc_out": 2e-3, "posenc_apply": 4e-3, "posenc": 5e-3,
               "liger_kernel": 6e-3, "flash_attn": 2e-3}
    row = {"label": "1x1x8x8 f32 half", "seconds": {"forward": seconds, "forward+backward": dict(seconds)},
           "bandwidth_gb_s": {"copy_": 1234.4, "posenc_out": 617.2}}
    head, _, fwd, bwd = rotary_table([row]).splitlines()
    columns = head.split()
    assert {"Liger", "FA", "LG/ap", "FA/ap", "cp_GB/s", "out_GB/s"} <= set(columns)
    cells = dict(zip(columns[2:], fwd.split()[4:]))  # after the label's three words and the pass
    assert cells["LG/ap"] == "1.50" and cells["FA/ap"] == "0.50" and cells["Liger"] == "6.00"
    assert cells["cp_GB/s"] == "1234" and cells["out_GB/s"] == "617" and cells["out/cp_"] == "2.00"
    assert dict(zip(columns[2:], bwd.split()[4:]))["cp_GB/s"] == "-"  # bandwidth: the forward only
    cpu = {n: t for n, t in seconds.items() if n not in ("liger_kernel", "flash_attn")}
    row["seconds"] = {"forward": cpu, "forward+backward": cpu}
    assert not {"Liger", "FA", "LG/ap", "FA/ap"} & set(rotary_table([row]).splitlines()[0].split())


# -- the meta ---------------------------------------------------------------------------------

def test_the_report_names_the_device(monkeypatch):
    from posenc.bench.tables import report

    meta = {"date": "2026-01-02T03:04:05+0000", "device": "cuda:0", "device_name": "Fake GPU 0", "cuda": "12.4",
            "triton": "3.1.0", "liger-kernel": None, "flash-attn": "2.8.3", "torch": "2.9", "torch_threads": 4,
            "cpus": 16, "load_avg": [0.0] * 3, "load_avg_end": [0.0] * 3, "wall_s": 1.0}
    first = report(Result(profile="quick", meta=meta)).splitlines()[0]
    assert first.startswith("posenc bench (quick, 2026-01-02T03:04:05+0000) on Fake GPU 0 (cuda:0, CUDA 12.4, "
                            "Triton 3.1.0, liger-kernel None, flash-attn 2.8.3): torch 2.9")


# -- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bench_on_cuda_end_to_end(monkeypatch, tmp_path, capsys):
    from posenc import rotary

    monkeypatch.setitem(PROFILES, "quick", TINY)
    path = tmp_path / "cuda.json"
    assert main(["bench", "--quick", "--what", "rotary", "--device", "cuda", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    data = json.loads(path.read_text())
    meta = data["meta"]
    index = torch.cuda.current_device()
    assert meta["device"] == f"cuda:{index}" and meta["device_name"] == torch.cuda.get_device_name(index)
    assert meta["cuda"] == torch.version.cuda and {"triton", "liger-kernel", "flash-attn"} <= set(meta)
    assert time.strptime(meta["date"], "%Y-%m-%dT%H:%M:%S%z")
    assert meta["device_name"] in out.splitlines()[0] and "HBM roofline" in out and "out_GB/s" in out
    assert data["attention"] == []
    assert len(data["rotary"]) == len(rotary_cases(TINY, "cuda")) == 24
    if importlib.util.find_spec("triton") is not None:
        assert rotary._TRITON  # posenc's Triton kernel ran
    ran = set()
    for row in data["rotary"]:
        assert row["device"] == meta["device"]
        for times in row["seconds"].values():
            assert all(t > 0 for t in times.values())
        for name in ("copy_", "posenc_out"):
            seconds = row["seconds"]["forward"][name]
            assert row["bandwidth_gb_s"][name] == pytest.approx(2 * row["bytes"] / seconds / 1e9)
        assert max(row["max_abs_diff_vs_posenc"].values()) < 0.1, row["label"]  # every candidate rotates the same way
        for peer in ("liger_kernel", "flash_attn"):
            if peer in row["seconds"]["forward"]:
                ran.add(peer)
                assert peer in row["seconds"]["forward+backward"]
            else:
                assert row["missing"][peer].startswith(("not installed (", "n/a ("))
                assert row["missing"][peer] != "n/a (CUDA only)"
    for peer, dist in (("liger_kernel", "liger-kernel"), ("flash_attn", "flash-attn")):
        assert (peer in ran) == (meta[dist] is not None), peer  # installed peers ran
