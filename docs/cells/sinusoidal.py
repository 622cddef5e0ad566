import math
from cellplot import heatmap, show

L, d, base = 64, 32, 10000  # positions, dimensions, base: change them


def pe(pos):  # PE(pos, 2i) = sin(pos/base^(2i/d)), PE(pos, 2i+1) = cos(...)
    row = []
    for i in range(d // 2):
        angle = pos / base ** (2 * i / d)
        row += [math.sin(angle), math.cos(angle)]
    return row


table = [pe(pos) for pos in range(L)]  # L rows of d numbers
for pos in (1, L - 1):
    show(f"PE[{pos}]", table[pos])
nearest = min(math.dist(table[p], table[q]) for p in range(L) for q in range(p))
print("the two closest positions are", nearest, "apart: no two rows are alike")
heatmap(table, title=f"sinusoidal PE, {L} positions × {d} dimensions",
        xlabel="dimension", ylabel="position")
