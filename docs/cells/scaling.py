import math
from cellplot import lines, show

d, base = 64, 10000  # RoPE's rotary dimension and base
trained, factor = 2048, 4  # the length it was trained at, and the stretch wanted
theta = [base ** (-2 * i / d) for i in range(d // 2)]

# position interpolation: every pair turns factor times slower
linear = [t / factor for t in theta]
# NTK: base → base·factor^(d/(d−2)): the fastest pair kept, the slowest slowed by factor
ntk = [t * factor ** (-2 * i / (d - 2)) for i, t in enumerate(theta)]


def pair_of(turns):  # the pair that makes `turns` turns over the trained length
    return d * math.log(trained / (turns * 2 * math.pi)) / (2 * math.log(base))


# YaRN: pairs of more than beta_fast turns in training kept, of fewer than beta_slow
# turns slowed by factor, a ramp between; q·k scaled by its attention factor
beta_fast, beta_slow = 32, 1
low = max(math.floor(pair_of(beta_fast)), 0)
high = min(math.ceil(pair_of(beta_slow)), d - 1)
ramp = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(d // 2)]
yarn = [t / factor * r + t * (1 - r) for t, r in zip(theta, ramp)]
yarn_attention = 0.1 * math.log(factor) + 1

show("theta_linear", linear)
show("theta_ntk", ntk)
show("theta_yarn", yarn)
show("yarn_attention_factor", yarn_attention)
for name, t in (("linear", linear), ("ntk", ntk), ("yarn", yarn)):
    print(f"{name}: the fastest pair turns {theta[0] / t[0]:.3g}× slower, "
          f"the slowest {theta[-1] / t[-1]:.3g}× slower")
pairs = list(range(d // 2))
waves = [(name, pairs, [2 * math.pi / t for t in th]) for name, th in
         (("RoPE", theta), ("linear", linear), ("NTK", ntk), ("YaRN", yarn))]
lines(waves, title="wavelength 2π/θ_i of each pair", xlabel="pair i",
      ylabel="positions per turn", logy=True,
      guides=[(f"trained length {trained}", trained), (f"{factor}× longer", factor * trained)])
