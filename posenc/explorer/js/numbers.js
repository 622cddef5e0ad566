// The key numbers: posenc.analysis.key_numbers, printed as `posenc show` prints them.
function build(full) { return SCHEMES[full.get('scheme')](full); }
function dist(a, b) { var s = 0; for (var i = 0; i < a.length; i++) { var d = a[i] - b[i]; s += d * d; } return Math.sqrt(s); }
function dot(a, b) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i] * b[i]; return s; }
// One pass over the positions computes everything a table scheme shows (the table is never held
// whole: 16384 × 4096 would not fit), each cos and sin once:
//   d[r]     = |row(0) − row(r)|. Every table drawn here is row(p) = R(p)·row(0) with R(p) orthogonal
//              (pairs rotated by p θ_i), so |row(p) − row(q)| = d[q − p] and the closest pair under
//              analysis.min_fingerprint_distance's rule (ties within FINGERPRINT_RTOL go to the first
//              p, then the first q) is (0, r*);
//   sim[r]   = cosine of row(0), row(r): similarity_vs_distance, the same for every p;
//   residual = linear_map(tab, 1)'s (additive), with the exact map: a rotation by θ_i per (sin, cos) pair;
//   score[r] = rotary_scores: <R(0)q, R(r)k>/D with q = k = 1 = (2a² Σ_i cos(rθ_i)·ζ_i(r) + D − R)/D,
//              ζ_i(r) = exp(−r·decay_i) for xPos (the key's scale; the query's is 1 at 0), else 1;
//   bound[r] = rope_decay_bound: (1/(d/2)) Σ_j |S_j|, S_j = Σ_{i<j} e^{i r θ_i}.
function analyse(m, L) {  // memoised on the model: the key numbers and three figures share one pass
  if (m.analysed && m.analysed.L === L) return m.analysed.result;
  var result = analysePass(m, L);
  m.analysed = {L: L, result: result};
  return result;
}
function analysePass(m, L) {
  var rotary = m.kind === 'rotary', th = rotary ? m.freqAt(L) : m.invFreq, h = th.length;
  var d = new Float64Array(L), sim = new Float64Array(L), score = new Float64Array(L), bound = new Float64Array(L);
  var c = new Float64Array(h), sn = new Float64Array(h), pc = new Float64Array(h), ps = new Float64Array(h);
  var a2 = rotary ? m.attentionFactor * m.attentionFactor : 0, worst = 0, scale = 0, n0 = 0, cs = [];
  if (!rotary) for (var k = 0; k < h; k++) cs.push([Math.cos(th[k]), Math.sin(th[k])]);
  for (var p = 0; p < L; p++) {
    var dd = 0, dt = 0, nn = 0, sc = 0, re = 0, im = 0, bs = 0, i, x, y;
    for (i = 0; i < h; i++) { c[i] = Math.cos(p * th[i]); sn[i] = Math.sin(p * th[i]); }
    for (i = 0; i < h; i++) {
      x = c[i]; y = sn[i];
      // row(0) is [1.. | 0..] (rotary: [cos | sin]) or [0, 1, 0, 1, ..] (sinusoidal: sin, cos interleaved)
      dd += rotary ? (x - 1) * (x - 1) + y * y : y * y + (x - 1) * (x - 1);
      dt += x; nn += x * x + y * y;
      scale = Math.max(scale, Math.abs(x), Math.abs(y));
      if (rotary) {
        sc += 2 * a2 * x * (m.decay ? Math.exp(-p * m.decay[i]) : 1);
        re += x; im += y; bs += Math.sqrt(re * re + im * im);
      } else if (p) {  // (sin, cos)(p) from (sin, cos)(p − 1): a rotation by θ_i
        var a = ps[i], b = pc[i];
        worst = Math.max(worst, Math.abs(a * cs[i][0] + b * cs[i][1] - y), Math.abs(b * cs[i][0] - a * cs[i][1] - x));
      }
    }
    if (!p) n0 = Math.sqrt(nn) || 1;
    d[p] = Math.sqrt(dd); sim[p] = dt / (n0 * (Math.sqrt(nn) || 1));
    if (rotary) { score[p] = (sc + (m.headDim - m.rotaryDim)) / m.headDim; bound[p] = bs / h; }
    var t = pc; pc = c; c = t; t = ps; ps = sn; sn = t;
  }
  d[0] = Infinity;
  var best = Infinity, q = 1, rtol = SCHEMA.fingerprint_rtol;
  for (p = 1; p < L; p++) best = Math.min(best, d[p]);
  while (!(d[q] <= best * (1 + rtol))) q++;
  return {closest: {d: best, p: 0, q: q}, sim: sim, residual: worst / (scale || 1), score: score, bound: bound};
}
function defaultView() { var g = SCHEMA.grid['default']; return {grid: g, patch: [Math.floor(g[0] / 2), Math.floor(g[1] / 2)]}; }
// posenc show SPEC --grid HxW --patch R,C for a grid scheme: analysis.grid_numbers(grid_map(...))
function gridNumbers(m, view) {
  var h = view.grid[0], w = view.grid[1], r = view.patch[0], c = view.patch[1], v = gridValues(m, h, w, r, c);
  var far = [r >= h / 2 ? 0 : h - 1, c >= w / 2 ? 0 : w - 1];
  var picks = [['itself', [r, c]], ['right', [r, c + 1]], ['below', [r + 1, c]], ['far corner', far]].filter(function (p) { return p[1][0] < h && p[1][1] < w; });
  return [['grid', h + ' × ' + w + ' patches, signal with patch (' + r + ', ' + c + '): ' + SCHEMA.grid.quantity[m.kind]],
          ['signal at ' + picks.map(function (p) { return p[0]; }).join(', '), picks.map(function (p) { return fmtG(v[p[1][0] * w + p[1][1]], 3); }).join(', ')]];
}
function keyNumbers(full, L, m, view, numHeads) {  // m: the model of full, when the caller has built it; view: {grid, patch} of a grid scheme;
  // numHeads: --heads (a content scheme's weights are a mean over that many heads)
  m = m || build(full);
  var out = [];
  var specText = [];
  full.forEach(function (v, k) { if (k !== 'scheme') specText.push(k + '=' + pyStr(v)); });
  out.push(['scheme', full.get('scheme')], ['kind', m.kind], ['spec', specText.join(', ') || '(no parameters)']);
  if (m.axes > 1) return out.concat(gridNumbers(m, view || defaultView()));
  var scan;
  if (m.kind === 'additive' || m.kind === 'rotary') {
    scan = analyse(m, L);
    var c = scan.closest;
    out.push(['table (positions × dims)', L + ' × ' + m.width]);
    out.push(['closest two positions', c.p + ' and ' + c.q + ', distance ' + fmtG(c.d, 4) + ' (' + (c.d > 1e-9 ? 'all distinct' : 'NOT all distinct') + ')']);
  }
  if (m.kind === 'additive') {
    var sim = scan.sim;
    out.push(['cosine similarity at r=1, 10, L-1', [1, Math.min(10, L - 1), L - 1].map(function (r) { return fmtF(sim[r], 3); }).join(', ')]);
    if (L - 1 > m.width) {
      var res = scan.residual;
      out.push(['PE(p+1) = M·PE(p) residual', res < 1e-6 ? '< 1e-6 (linear)' : fmtE(res, 2) + ' (not linear)']);
    } else out.push(['PE(p+1) = M·PE(p) residual', 'needs --length > ' + (m.width + 1)]);
  }
  if (m.kind === 'rotary') {
    var sc = analyse(m, L).score;
    out.push(['q·k/D (q=k=1) at r=0, 1, 10, L-1', [0, 1, Math.min(10, L - 1), L - 1].map(function (r) { return fmtF(sc[r], 3); }).join(', ')]);
    out.push(['attention factor', fmtG(m.attentionFactor, 4)]);
  }
  if (m.invFreq) {
    var lam = Array.from(m.invFreq, function (t) { return 2 * Math.PI / t; }), lo = Infinity, hi = -Infinity;
    lam.forEach(function (x) { lo = Math.min(lo, x); hi = Math.max(hi, x); });
    var turns = Array.from(m.invFreq, function (t) { return L * t / (2 * Math.PI); });
    out.push(['wavelengths (positions)', fmtG(lo, 4) + ' .. ' + fmtG(hi, 4) + ' over ' + lam.length + ' pairs']);
    out.push(['pairs with < 1 turn in L=' + L, turns.filter(function (t) { return t < 1; }).length + ' of ' + lam.length]);
  }
  if (m.kind === 'bias' || m.kind === 'relative') {  // a relative scheme's term with q = k = 1 (dual_chunk)
    var H = m.numHeads, heads = [];
    for (var h = 0; h < H; h++) heads.push(h);
    out.push(['heads', String(H)]);
    out.push(['term at r=1 per head', heads.map(function (h) { return fmtG(m.bias(h, 1, 0), 3); }).join(', ')]);
    out.push(['term at r=' + (L - 1) + ' per head', heads.map(function (h) { return fmtG(m.bias(h, L - 1, 0), 3); }).join(', ')]);
    var n = Math.min(L, 64), sym = true;
    for (h = 0; h < H && sym; h++) {
      for (var i = 0; i < n && sym; i++) {
        for (var j = 0; j < n; j++) {  // np.allclose(maps, maps.T): |a - b| <= 1e-8 + 1e-5 |b|
          var a = m.bias(h, i, j), b = m.bias(h, j, i);
          if (!(Math.abs(a - b) <= 1e-8 + 1e-5 * Math.abs(b))) { sym = false; break; }
        }
      }
    }
    out.push(['symmetric in i−j (first ' + n + ' positions)', sym ? 'yes' : 'no']);
  }
  if (m.kind === 'none') out.push(['positional signal', 'none: attention is permutation-equivariant without a causal mask']);
  if (m.kind === 'content') {  // CoPE (the only content scheme drawn): e = 0 at first, so identical tokens weigh 1/L each
    var heads = numHeads || SCHEMA.defaults.heads, wsum = 0;
    for (var hh = 0; hh < heads; hh++) wsum += 1 / L;  // analysis.content_weights(...).mean(0): the heads summed in order
    out.push(['positions', 'counted from the tokens (no position input)' + (m.causalOnly ? '; causal only' : '')]);
    out.push(["reads the layer's input (hidden=)", m.readsHidden ? 'yes' : 'no']);
    out.push(['weight at r=0, 1, L-1 (identical tokens)', [0, 1, L - 1].map(function () { return fmtG(wsum / heads, 3); }).join(', ')]);
    out = out.concat(copeDescribe(SCHEMA.cope.sentence, m.nposMax));
  }
  return out;
}
