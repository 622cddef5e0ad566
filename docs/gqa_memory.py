"""Peak resident memory (VmHWM, a fresh process per case) of posenc.attention with grouped
key/value heads against the same call with k and v repeated first: causal forward at L = 8192,
H = 32, H_kv = 8, head_dim 64, float32, one thread, without and with a key padding mask.

    .venv/bin/python docs/gqa_memory.py
"""

import subprocess
import sys

CASE = r"""
import sys, torch, posenc
mode, name, masked = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
torch.set_num_threads(1)
B, H, Hkv, L, D = 1, 32, 8, 8192, 64
q, k, v = torch.randn(B, H, L, D), torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
pe = None if name == "none" else posenc.build({"scheme": name, "num_heads": H})
pad = torch.ones(B, L, dtype=torch.bool)
pad[:, :100] = False
def hwm():
    return next(int(x.split()[1]) / 1024 for x in open("/proc/self/status") if x.startswith("VmHWM"))
inputs = hwm()
if mode == "repeated":
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
with torch.no_grad():
    posenc.attention(q, k, v, pe, causal=True, attention_mask=pad if masked else None)
print(f"{inputs:.0f} {hwm():.0f}")
"""

if __name__ == "__main__":
    print("| scheme | mask | inputs MiB | grouped MiB | repeated MiB |")
    print("|---|---|---|---|---|")
    for name in ("none", "alibi"):
        for masked in ("0", "1"):
            peaks = {}
            for mode in ("grouped", "repeated"):
                out = subprocess.run([sys.executable, "-c", CASE, mode, name, masked], capture_output=True,
                                     text=True, check=True).stdout.split()
                inputs, peaks[mode] = out
            print(f"| {name} | {'padding' if masked == '1' else '-'} | {inputs} | {peaks['grouped']} | "
                  f"{peaks['repeated']} |")
