import math
from cellplot import heatmap, show

d, base, k = 16, 10000, 5  # dimensions, base, offset: change them
theta = [base ** (-2 * i / d) for i in range(d // 2)]


def pe(pos):
    return [f(pos * t) for t in theta for f in (math.sin, math.cos)]


M = [[0.0] * d for _ in range(d)]  # M_k: a 2×2 rotation by k·θ_i per pair, no pos in it
for i, t in enumerate(theta):
    c, s = math.cos(k * t), math.sin(k * t)
    M[2 * i][2 * i], M[2 * i][2 * i + 1] = c, s
    M[2 * i + 1][2 * i], M[2 * i + 1][2 * i + 1] = -s, c

for pos in (0, 7, 1000):
    moved = [sum(m * v for m, v in zip(row, pe(pos))) for row in M]  # M_k · PE(pos)
    show(f"rotated[pos={pos}]", moved)
    gap = max(abs(a - b) for a, b in zip(moved, pe(pos + k)))
    print(f"  largest difference from PE({pos} + {k}):", gap)
heatmap(M, title=f"M_{k}: PE(pos + {k}) = M_{k} · PE(pos), for every pos",
        xlabel="column", ylabel="row")
