"""What ``posenc bench`` prints: the rotary and attention tables and the goal lines (``report``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.bench.attention import goal_line, pass_of, training_goal_lines
from posenc.bench.rotary import rotary_goal_lines

if TYPE_CHECKING:
    from posenc.bench import Result


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def _gb_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.2f}"


# The rotary table's columns: (header, width, the cell from a row's times t, its bandwidth bw and
# whether it is the forward line); a column marked optional is shown only when some row has it.
_ROTARY_COLUMNS = [
    ("copy_", 7, False, lambda t, bw, fwd: _ms(t.get("copy_"))),
    ("clone", 7, False, lambda t, bw, fwd: _ms(t.get("clone"))),
    ("out=", 7, False, lambda t, bw, fwd: _ms(t.get("posenc_out"))),
    ("apply", 7, False, lambda t, bw, fwd: _ms(t.get("posenc_apply"))),
    ("module", 7, False, lambda t, bw, fwd: _ms(t.get("posenc"))),
    ("cos/sin", 7, False, lambda t, bw, fwd: _ms(t.get("posenc_cos_sin"))),
    ("HF", 7, False, lambda t, bw, fwd: _ms(t.get("transformers"))),
    ("RET", 7, False, lambda t, bw, fwd: _ms(t.get("rotary_embedding_torch"))),
    ("Liger", 7, True, lambda t, bw, fwd: _ms(t.get("liger_kernel"))),
    ("FA", 7, True, lambda t, bw, fwd: _ms(t.get("flash_attn"))),
    ("step", 7, False, lambda t, bw, fwd: _ms(t.get("posenc_step"))),
    ("HFstep", 7, False, lambda t, bw, fwd: _ms(t.get("transformers_step"))),
    ("cp_GB/s", 7, False, lambda t, bw, fwd: _gb_s(bw.get("copy_") if fwd else None)),
    ("out_GB/s", 8, False, lambda t, bw, fwd: _gb_s(bw.get("posenc_out") if fwd else None)),
    ("out/cp_", 7, False, lambda t, bw, fwd: _ratio(t.get("posenc_out"), t.get("copy_"))),
    ("ap/cl", 6, False, lambda t, bw, fwd: _ratio(t.get("posenc_apply"), t.get("clone"))),
    ("HF/pe", 6, False, lambda t, bw, fwd: _ratio(t.get("transformers"), t.get("posenc"))),
    ("RET/pe", 6, False, lambda t, bw, fwd: _ratio(t.get("rotary_embedding_torch"), t.get("posenc"))),
    ("LG/ap", 6, True, lambda t, bw, fwd: _ratio(t.get("liger_kernel"), t.get("posenc_apply"))),
    ("FA/ap", 6, True, lambda t, bw, fwd: _ratio(t.get("flash_attn"), t.get("posenc_apply"))),
    ("HFst/st", 7, False, lambda t, bw, fwd: _ratio(t.get("transformers_step"), t.get("posenc_step"))),
]
_OPTIONAL_NEEDS = {"Liger": "liger_kernel", "FA": "flash_attn", "LG/ap": "liger_kernel", "FA/ap": "flash_attn"}


def rotary_table(rows: list[dict]) -> str:
    """One line per case and pass: times in ms, the bandwidth of ``copy_`` and ``out=`` (forward,
    GB/s), then the ratios the goals are stated in.

    ``out/cp_`` = ``apply_rotary(out=)`` ÷ ``copy_`` into warm memory (the roofline);
    ``ap/cl`` = allocating ``apply_rotary`` ÷ ``clone()`` (the cost of allocation);
    ``HF/pe``, ``RET/pe`` = peer ÷ posenc's module forward (> 1: posenc is faster);
    ``LG/ap``, ``FA/ap`` = Liger-Kernel's, flash-attn's kernel (cos/sin given) ÷ posenc's
    ``apply_rotary`` (cos/sin given; > 1: posenc is faster), shown where they ran (CUDA);
    ``HFst/st`` = transformers' decoding step ÷ posenc's (per tensor; > 1: posenc is faster).
    """
    present = {n for row in rows for t in row["seconds"].values() for n in t}
    columns = [c for c in _ROTARY_COLUMNS if not c[2] or _OPTIONAL_NEEDS[c[0]] in present]
    head = f"{'case':<34} {'pass':<7} " + " ".join(f"{name:>{width}}" for name, width, _, _ in columns)
    lines = [head, "-" * len(head)]
    for row in rows:
        bw = row.get("bandwidth_gb_s", {})
        for pass_, t in row["seconds"].items():
            fwd = pass_ == "forward"
            cells = " ".join(f"{cell(t, bw, fwd):>{width}}" for _, width, _, cell in columns)
            lines.append(f"{row['label']:<34} {'fwd' if fwd else 'fwd+bwd':<7} {cells}")
    return "\n".join(lines)


def attention_table(rows: list[dict]) -> str:
    """One line per pass, scheme, method and length: time, first call, peak RSS and its baselines."""
    head = (f"{'pass':<7} {'scheme':<14} {'method':<18} {'L':>6} {'time s':>8} {'1st s':>7} {'peak GB':>8} "
            f"{'import GB':>9} {'inputs GB':>9} {'x floor':>7}")
    lines = [head, "-" * len(head)]
    floor = {(pass_of(r), r["length"]): r.get("seconds") for r in rows if r["method"] == "sdpa_floor"}
    for r in rows:
        short = "fwd" if pass_of(r) == "forward" else "fwd+bwd"
        method = r["method"] + (f" ({r['backend']})" if r.get("backend") else "")  # auto's choice
        if "error" in r:
            lines.append(f"{short:<7} {r['scheme']:<14} {method:<18} {r['length']:>6} error: {r['error']}")
            continue
        lines.append(f"{short:<7} {r['scheme']:<14} {method:<18} {r['length']:>6} {r['seconds']:>8.3f} "
                     f"{r['first_s']:>7.2f} {r['peak_rss_gb']:>8.2f} {r['rss_after_import_gb']:>9.2f} "
                     f"{r['rss_after_inputs_gb']:>9.2f} {_ratio(r['seconds'], floor.get((pass_of(r), r['length']))):>7}")
    return "\n".join(lines)


def report(result: Result) -> str:
    """The tables ``posenc bench`` prints."""
    meta = result.meta
    on = ""
    if meta.get("device_name"):
        on = (f" on {meta['device_name']} ({meta.get('device')}, CUDA {meta.get('cuda')}, Triton {meta.get('triton')}, "
              f"liger-kernel {meta.get('liger-kernel')}, flash-attn {meta.get('flash-attn')})")
    parts = [f"posenc bench ({result.profile}, {meta.get('date')}){on}: torch {meta.get('torch')}, "
             f"{meta.get('torch_threads')} threads, {meta.get('cpus')} CPUs, load {meta['load_avg'][0]:.2f} -> "
             f"{meta['load_avg_end'][0]:.2f}, {meta['wall_s']:.0f} s"]
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
                  "position ids, then apply_rotary_pos_emb on q and k); GB/s = bytes of x read and of "
                  "out written per second (forward)"
                  + (". On the GPU copy_ is the HBM roofline; Liger = Liger-Kernel's LigerRopeFunction (q and k, "
                     "in place, per tensor), FA = flash-attn's apply_rotary_emb, each on its own layout, made "
                     "outside the timing, with cos/sin given; LG/ap, FA/ap > 1: posenc's apply_rotary is faster:"
                     if meta.get("device_name") else ":"),
                  rotary_table(result.rotary), *rotary_goal_lines(result.rotary)]
        missing = {f"{k}: {v}" for r in result.rotary for k, v in r["missing"].items() if "n/a" not in v}
        parts += [f"missing peer: {m}" for m in sorted(missing)]
    if result.attention:
        parts += ["", "Attention, causal float32, B=1, 8 heads, head_dim 64, fresh process per case (peak = "
                  "VmHWM, with the interpreter and q/k/v; posenc: backend auto, its choice in parentheses; fwd "
                  "flex: backend='flex' after 9 calls at other lengths, time after its compiling first call; "
                  "fwd+bwd: gradients of q, k, v and the parameters):",
                  attention_table(result.attention)]
        parts += [goal_line(result.attention), *training_goal_lines(result.attention)]
    return "\n".join(parts)
