// A new scheme is one function here (plus its name in PAGE_SCHEMES, posenc/explorer/__init__.py):
// it validates the spec as the module's __init__ does and returns a model of one of the kinds
// below; the key numbers and figures dispatch on the kind. A grid scheme (axes >= 2, gridModel) is
// additive or rotary with `axes` set: its figure is figGrid and its rows gridNumbers (numbers.js).
// A model has: kind ('none' | 'additive' | 'rotary' | 'bias' | 'relative' | 'content'), and by kind
//   additive, rotary: width, row(p) -> Float64Array (the table's row at position p, [L, width]),
//                     invFreq (θ the scheme registers), and an isometry: row(p) = R(p)·row(0);
//   rotary:           headDim, rotaryDim, freqAt(L), attentionFactor, decay (xPos) or null,
//                     spectrum() -> {before, after, context, extended};
//   bias:             numHeads, bias(h, i, j) (query i, key j), buckets (T5) optional;
//   relative:         a bias's calls (bias: the term with q = k = 1, as posenc show reads it; range(h, n) its
//                     extremes over n positions), and score(q, k, i, j), the whole score of q at i and k at j;
//   content:          nposMax, causalOnly, readsHidden (CoPE; its positions: cope.js).
function ropeInvFreq(rd, base) { return range(rd / 2, function (i) { return powCR(base, -(2 * i) / rd); }); }
function alibiSlopes(n) {
  function pow2(k) { var start = powCR(2, -powCR(2, -(Math.log2(k) - 3))); var a = []; for (var i = 0; i < k; i++) a.push(start * powCR(start, i)); return a; }
  if (Number.isInteger(Math.log2(n))) return pow2(n);
  var closest = Math.pow(2, Math.floor(Math.log2(n)));
  var extra = alibiSlopes(2 * closest).filter(function (_, i) { return i % 2 === 0; }).slice(0, n - closest);
  return pow2(closest).concat(extra);
}
function t5Bucket(r, nb, md, bidi) {  // reference.t5_bucket for one relative distance j - i
  var bucket = 0, n;
  if (bidi) { nb = Math.floor(nb / 2); bucket += r > 0 ? nb : 0; n = Math.abs(r); } else n = Math.max(-r, 0);
  var me = Math.floor(nb / 2);
  if (n < me) return bucket + n;
  var large = me + Math.trunc(logCR(Math.max(n, 1) / me) / logCR(md / me) * (nb - me));
  return bucket + Math.min(large, nb - 1);
}
function tableModel(width, invFreq, row) { return {width: width, invFreq: invFreq, row: row}; }
// rope.check_axes_dims: one even size per axis, summing to rotary_dim (default: an equal split)
function axesDims(v, axes, rotaryDim, D) {
  if (v === null) {
    var rd = rotaryDim === null ? D : rotaryDim;
    if (rd % (2 * axes)) fail('rotary_dim must be divisible by 2·axes = ' + 2 * axes + ' for an equal split over the axes, got rotary_dim=' + rd + ' with axes=' + axes + '; or give axes_dims=[...] (even sizes summing to rotary_dim)');
    return new Array(axes).fill(rd / axes);
  }
  if (!Array.isArray(v)) fail('axes_dims must be a list of ' + axes + ' even sizes, got ' + pyRepr(v) + ' (' + pyType(v) + ')');
  if (v.length !== axes) fail('axes_dims must have one size per axis (axes=' + axes + '), got ' + v.length + ': ' + pyRepr(v));
  var dims = v.map(function (x, i) { return checkEven('axes_dims[' + i + ']', checkInt('axes_dims[' + i + ']', x, 2)); });
  var total = dims.reduce(function (a, b) { return a + b; }, 0), shown = '[' + dims.join(', ') + ']';
  if (rotaryDim !== null && total !== rotaryDim) fail('axes_dims must sum to rotary_dim=' + rotaryDim + ', got ' + shown + ' (sum ' + total + ')');
  if (total > D) fail('axes_dims must sum to at most head_dim=' + D + ', got ' + shown + ' (sum ' + total + ')');
  return dims;
}
// A grid scheme (axes >= 2): axis a owns dims[a] dims, a 1D sinusoidal / rope of that size with its
// own spectrum base^(-2i/dims[a]) (reference.sinusoidal with axes, reference.rope_axial). A patch
// (r, c) of an H × W grid sits at (0, .., 0, r, c) (analysis.grid_positions_for). Its signal with
// the patch at q, analysis.grid_map, in closed form (both sums are exact identities):
//   additive: cosine similarity; each axis's block is [sin, cos] pairs of norm² dims[a]/2, so
//             cos(PE(p), PE(q)) = Σ_pairs cos((p_a − q_a) θ_i) / (width/2);
//   rotary:   q·k / D with q = k = 1: a pair (1, 1) rotated by φ and by ψ has dot 2cos(φ − ψ), the
//             width − rd dims past the rotated ones add 1 each: (2 Σ_pairs cos((p_a − q_a) θ_i) + width − rd) / width;
//             the same for every head and layout, so the mean over heads is this.
function gridModel(kind, axes, width, dims, base, rd) {
  var theta = [], axis = [];
  dims.forEach(function (n, a) { for (var i = 0; i < n / 2; i++) { theta.push(powCR(base, -(2 * i) / n)); axis.push(a); } });
  var inv = Float64Array.from(theta);
  var m = {kind: kind, axes: axes, axesDims: dims, width: width, rotaryDim: rd, headDim: width, invFreq: inv, attentionFactor: 1, decay: null};
  m.spectrum = function () { return {before: inv, after: inv, context: null, extended: null, type: null}; };
  m.signal = function (p, q) {  // p, q: [axes] positions
    var s = 0;
    for (var i = 0; i < theta.length; i++) s += Math.cos((p[axis[i]] - q[axis[i]]) * theta[i]);
    return kind === 'additive' ? s / (width / 2) : (2 * s + width - rd) / width;
  };
  return m;
}
// analysis.grid_map: values[r][c] = the signal of patch (r, c) with the patch (pr, pc), row-major; a model with
// its own placement (m.place: analysis.grid_positions_for's grid_positions, dinov3's coordinates) places the patches
function gridValues(m, h, w, pr, pc) {
  var pos = m.place ? function (r, c) { return m.place(r, c, h, w); }
                    : function (r, c) { var p = new Array(m.axes).fill(0); p[m.axes - 2] = r; p[m.axes - 1] = c; return p; };
  var me = pos(pr, pc), out = new Float64Array(h * w);
  for (var r = 0; r < h; r++) for (var c = 0; c < w; c++) out[r * w + c] = m.signal(pos(r, c), me);
  return out;
}
var SCHEMES = {
  nope: function () { return {kind: 'none'}; },
  sinusoidal: function (s) {  // Vaswani et al. 2017: PE(p, 2i) = sin(p θ_i), PE(p, 2i+1) = cos(p θ_i)
    var d = checkEven('d_model', checkInt('d_model', s.get('d_model'), 2));
    var base = checkFloat('base', s.get('base'), {min: 0, minOpen: true});
    var axes = checkInt('axes', s.get('axes'), 1, 8);
    if (d % (2 * axes)) fail('d_model must be divisible by 2·axes = ' + 2 * axes + ' (each axis takes an even share of the dims), got d_model=' + d + ' with axes=' + axes);
    if (axes > 1) return gridModel('additive', axes, d, new Array(axes).fill(d / axes), base, d);
    var inv = range(d / 2, function (i) { return powCR(base, -(2 * i) / d); });
    var m = tableModel(d, inv, function (p) {
      var out = new Float64Array(d);
      for (var i = 0; i < d / 2; i++) { out[2 * i] = Math.sin(p * inv[i]); out[2 * i + 1] = Math.cos(p * inv[i]); }
      return out;
    });
    m.kind = 'additive';
    return m;
  },
  rope: function (s) {  // RoFormer: pairs rotated by m θ_i, θ_i = base^(-2i/rotary_dim), then a scaling
    var D = checkEven('head_dim', checkInt('head_dim', s.get('head_dim'), 2));
    var base = checkFloat('base', s.get('base'), {min: 0, minOpen: true});
    var axes = checkInt('axes', s.get('axes'), 1, 8);
    var rd = s.get('rotary_dim') === null ? D : checkInt('rotary_dim', s.get('rotary_dim'), 2);
    if (axes === 1 && s.get('axes_dims') !== null) fail('axes_dims is for axial rope (axes >= 2), got axes_dims=' + pyRepr(s.get('axes_dims')) + ' with axes=1');
    var dims = axes > 1 ? axesDims(s.get('axes_dims'), axes, s.get('rotary_dim') === null ? null : rd, D) : null;
    if (dims) rd = dims.reduce(function (a, b) { return a + b; }, 0);
    if (rd > D) fail('rotary_dim must be <= head_dim=' + D + ', got ' + rd);
    checkEven('rotary_dim', rd);
    checkChoice('layout', s.get('layout'), ['half', 'interleaved']);
    if (axes > 1 && s.get('scaling') !== null) fail('scaling applies to one-axis rope; axial rope (axes=' + axes + ') takes scaling=None, got scaling=' + pyRepr(s.get('scaling')));
    if (axes > 1) return gridModel('rotary', axes, D, dims, base, rd);
    var before = ropeInvFreq(rd, base), sc = resolveScaling(s.get('scaling'), before, D, base);
    var m = {kind: 'rotary', headDim: D, rotaryDim: rd, invFreq: sc.inv, attentionFactor: sc.af, decay: sc.decay,
             width: rd, scaling: sc};
    m.freqAt = function (L) { return freqAt(sc, L); };
    m.tableAt = function (L) {  // [cos | sin] of the frequencies used for L positions
      var th = m.freqAt(L), h = rd / 2;
      return function (p) { var out = new Float64Array(rd); for (var i = 0; i < h; i++) { out[i] = Math.cos(p * th[i]); out[h + i] = Math.sin(p * th[i]); } return out; };
    };
    m.spectrum = function () {  // analysis.spectrum
      var p = sc.params, ctx = null, ext = null;
      if (p && p.has('original_max_positions') && isNum(p.get('original_max_positions'))) ctx = p.get('original_max_positions').v;
      if (ctx && p.has('factor') && isNum(p.get('factor'))) ext = pyRound(ctx * p.get('factor').v);
      var after = sc.byLength && ext ? freqAt(sc, ext) : sc.inv;
      return {before: before, after: after, context: ctx, extended: ext, type: sc.type};
    };
    return m;
  },
  dinov3: function (s) {  // Siméoni et al. 2025: φ = 2π·y·θ_j (first D/4 pairs), 2π·x·θ_j (next D/4), θ_j = base^(-4j/D),
    // at patch centres (y, x) = 2·(i + 1/2)/n − 1 in [−1, 1] (posenc.reference.dinov3); augmentations are training-time only
    var D = checkInt('head_dim', s.get('head_dim'), 4);
    if (D % 4) fail('head_dim must be divisible by 4 (D/4 frequencies on each of 2 axes), got ' + D);
    var base = checkFloat('base', s.get('base'), {min: 0, minOpen: true});
    checkChoice('layout', s.get('layout'), ['half', 'interleaved']);
    var normalize = checkChoice('normalize', s.get('normalize'), ['separate', 'max', 'min']);
    [['shift', 0], ['jitter', 1], ['rescale', 1]].forEach(function (b) {
      if (s.get(b[0]) !== null) checkFloat(b[0], s.get(b[0]), {min: b[1], max: 1e3});
    });
    var m = gridModel('rotary', 2, D, [D / 2, D / 2], base, D);  // per axis θ_i = base^(-2i/(D/2)) = base^(-4i/D)
    var theta = m.invFreq, quarter = D / 4;
    m.place = function (r, c, h, w) {  // dinov3_coordinates: (i + 0.5) / den, then 2·u − 1
      var den = {separate: [h, w], max: [Math.max(h, w), Math.max(h, w)], min: [Math.min(h, w), Math.min(h, w)]}[normalize];
      return [2 * ((r + 0.5) / den[0]) - 1, 2 * ((c + 0.5) / den[1]) - 1];
    };
    m.signal = function (p, q) {  // q = k = 1: q·k / D = (2/D) Σ_k cos(φ_k(p) − φ_k(q)), φ = 2π·(c·θ)
      var sum = 0;
      for (var i = 0; i < theta.length; i++) {
        var a = i < quarter ? 0 : 1;
        sum += Math.cos(2 * Math.PI * (p[a] * theta[i]) - 2 * Math.PI * (q[a] * theta[i]));
      }
      return 2 * sum / D;
    };
    return m;
  },
  alibi: function (s) {  // Press et al. 2022: bias = -m_h |i - j|
    var H = checkInt('num_heads', s.get('num_heads'), 1), slopes = alibiSlopes(H);
    return {kind: 'bias', numHeads: H, bias: function (h, i, j) { return -slopes[h] * Math.abs(i - j); }};
  },
  kerple: function (s) {  // Chi et al. 2022: -r1 log(1 + r2 |i-j|) or -r1 |i-j|^r2; r1, r2 as torch draws them (seed 0)
    var H = checkInt('num_heads', s.get('num_heads'), 1);
    var variant = checkChoice('variant', s.get('variant'), ['log', 'power']);
    var eps = checkFloat('eps', s.get('eps'), {min: 0, minOpen: true, max: 1});
    var rng = new TorchCPU(0), u1 = rng.rand(H), u2 = rng.rand(H), f = Math.fround, fe = f(eps);
    // nn.Parameter((rand * 2).clamp(min=eps)) in float32, then .double() and rates() clamp in float64
    var r1 = u1.map(function (u) { return Math.max(Math.max(f(u * 2), fe), eps); });
    var r2 = u2.map(function (u) { var x = Math.max(Math.max(u, fe), eps); return variant === 'power' ? Math.min(x, 2) : x; });
    var kernel = variant === 'log' ? function (d, b) { return Math.log1p(b * d); } : function (d, b) { return Math.pow(d, b); };
    return {kind: 'bias', numHeads: H, bias: function (h, i, j) { return -r1[h] * kernel(Math.abs(i - j), r2[h]); }};
  },
  t5: function (s) {  // Raffel et al. 2020: W[bucket(j - i), h]; W as torch draws it (seed 0)
    var H = checkInt('num_heads', s.get('num_heads'), 1);
    var bidi = checkBool('bidirectional', s.get('bidirectional'));
    var nb = checkInt('num_buckets', s.get('num_buckets'), bidi ? 4 : 2);
    var half = bidi ? Math.floor(nb / 2) : nb;
    var md = checkInt('max_distance', s.get('max_distance'), Math.floor(half / 2) + 1);
    var std = checkFloat('init_std', s.get('init_std'), {min: 0});
    var w = new TorchCPU(0).randn(nb * H), fs = Math.fround(std);  // (buckets, H), row-major
    var W = w.map(function (x) { return Math.fround(x * fs); });
    var lut = new Map();  // bucket of each clamped distance, as the module's bucket_lut
    function bucket(r) {
      r = Math.max(-md, Math.min(md, r));
      if (!lut.has(r)) lut.set(r, t5Bucket(r, nb, md, bidi));
      return lut.get(r);
    }
    return {kind: 'bias', numHeads: H, buckets: {count: nb, at: bucket},
            bias: function (h, i, j) { return W[bucket(j - i) * H + h]; }};
  },
  dual_chunk: function (s) {  // An et al. 2024 (Qwen2.5-1M): RoPE at positions remapped within chunks of l = chunk_size − local_size
    var D = checkEven('head_dim', checkInt('head_dim', s.get('head_dim'), 2));
    var C = checkInt('chunk_size', s.get('chunk_size'), 2), local = checkInt('local_size', s.get('local_size'), 0);
    if (local >= C) fail('local_size must be below chunk_size=' + C + ' (chunks of chunk_size − local_size tokens), got ' + local);
    var base = checkFloat('base', s.get('base'), {min: 0, minOpen: true});
    var L0 = s.get('original_max_position_embeddings') === null ? null : checkInt('original_max_position_embeddings', s.get('original_max_position_embeddings'), 1);
    var layout = checkChoice('layout', s.get('layout'), ['half', 'interleaved']), inv = ropeInvFreq(D, base), l = C - local;
    function queryAt(i, j) {  // reference.dual_chunk_query_positions: intra, successive, inter
      var apart = Math.floor(i / l) - Math.floor(j / l);
      return apart <= 0 ? i % l : apart === 1 ? Math.min(i % l + l, C) : Math.min(2 * l - 1, C);
    }
    function tau2(i) { if (L0 === null) return 1; var t = Math.max(1, 0.1 * logCR((i + 1) / L0) + 1); return t * t; }
    function score(q, k, i, j) {  // τ_i² · q · R((j mod l) − queryAt(i, j)) k, pairs of the layout
      var g = j % l - queryAt(i, j), out = 0;
      for (var f = 0; f < D / 2; f++) {
        var a = layout === 'half' ? f : 2 * f, b = layout === 'half' ? f + D / 2 : 2 * f + 1, c = Math.cos(g * inv[f]), sn = Math.sin(g * inv[f]);
        out += (q[a] * k[a] + q[b] * k[b]) * c + (q[b] * k[a] - q[a] * k[b]) * sn;
      }
      return tau2(i) * out;
    }
    var ones = new Float64Array(D).fill(1);
    var m = {kind: 'relative', numHeads: 1, headDim: D, invFreq: inv, score: score};
    // the relative term with q = k = 1 (analysis.score_term): τ²·2Σ cos(γ θ) less q·k = D, over √D
    m.bias = function (h, i, j) { return (score(ones, ones, i, j) - D) / Math.sqrt(D); };
    m.range = function (h, n) {  // not a function of j − i: every pair, on a grid of at most 256 × 256 for long maps
      var step = Math.max(1, Math.ceil(n / 256)), lo = Infinity, hi = -Infinity;
      for (var i = 0; i < n; i += step) for (var j = 0; j < n; j += step) { var v = m.bias(h, i, j); if (v < lo) lo = v; if (v > hi) hi = v; }
      return [lo, hi];
    };
    return m;
  },
  cope: function (s) {  // Golovneva et al. 2024: positions counted by gates; e = 0 at first (CoPE starts as NoPE)
    checkInt('head_dim', s.get('head_dim'), 1);
    var nposMax = checkInt('npos_max', s.get('npos_max'), 1);
    checkChoice('convention', s.get('convention'), SCHEMA.cope.conventions);
    return {kind: 'content', nposMax: nposMax, causalOnly: true, readsHidden: false};
  }
};
