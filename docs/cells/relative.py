import math
import random
from cellplot import lines, show

d, base = 16, 10000
theta = [base ** (-2 * i / d) for i in range(d // 2)]  # θ_i, one per pair of dimensions


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def sinusoidal(pos):  # added to the embedding of the token at pos
    return [f(pos * t) for t in theta for f in (math.sin, math.cos)]


random.seed(0)
max_positions = 24  # a learned table: one free row per position, and no more
learned = [[random.gauss(0, 0.02) for _ in range(d)] for _ in range(max_positions)]


def rope(x, pos):  # RoPE: each pair (x[2i], x[2i+1]) turned by pos·θ_i
    out = []
    for i, t in enumerate(theta):
        c, s = math.cos(pos * t), math.sin(pos * t)
        out += [x[2 * i] * c - x[2 * i + 1] * s, x[2 * i] * s + x[2 * i + 1] * c]
    return out


def learned_dot(p, r):  # None: the table has no row p + r
    return dot(learned[p], learned[p + r]) if p + r < max_positions else None


q = [math.cos(c) for c in range(d)]  # one query and one key vector
k = [math.sin(c + 1) for c in range(d)]
offsets, starts = range(20), (0, 8)
sin_dots, learned_dots, rope_scores = [], [], []
for p in starts:  # what attention can read: the token at p against the one at p + r
    sin_dots.append([dot(sinusoidal(p), sinusoidal(p + r)) for r in offsets])
    learned_dots.append([learned_dot(p, r) for r in offsets])
    rope_scores.append([dot(rope(q, p + r), rope(k, p)) for r in offsets])
    show(f"sinusoidal_dot[p={p}]", sin_dots[-1])
    show(f"learned_dot[p={p}]", learned_dots[-1])
    show(f"rope_score[p={p}]", rope_scores[-1])
for name, curves in (("sinusoidal: PE(p)·PE(p+r)", sin_dots),
                     ("learned: W[p]·W[p+r]", learned_dots),
                     ("RoPE: q at p+r · k at p", rope_scores)):
    lines([(f"from p = {p}", list(offsets), ys) for p, ys in zip(starts, curves)],
          title=name, xlabel="offset r", ylabel="dot product")
