// "dog bites man": one attention layer, fixed random weights (a seeded generator, not torch's)
var DEMO = {D: SCHEMA.demo.d_model, H: SCHEMA.demo.num_heads, hd: SCHEMA.demo.d_model / SCHEMA.demo.num_heads};
function hashSeed(text) { var h = 2166136261; for (var i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
function gauss(seed, n) {
  var rng = new TorchCPU(seed), u = rng.rand(2 * n), out = new Float64Array(n);
  for (var i = 0; i < n; i++) out[i] = Math.sqrt(-2 * Math.log(1 - u[2 * i])) * Math.cos(2 * Math.PI * u[2 * i + 1]);
  return out;
}
var PROJ = [1, 2, 3].map(function (k) { return gauss(k, DEMO.D * DEMO.D).map(function (x) { return x / Math.sqrt(DEMO.D); }); });
function demoModel(full) {  // the scheme at the demonstration's sizes (d_model 16, head_dim 8, 2 heads)
  var s = new Map(full);
  if (s.has('d_model')) s.set('d_model', pyInt(String(DEMO.D)));
  if (s.has('head_dim')) s.set('head_dim', pyInt(String(DEMO.hd)));
  if (s.has('num_heads')) s.set('num_heads', pyInt(String(DEMO.H)));
  if (s.has('rotary_dim') && s.get('rotary_dim') !== null && s.get('rotary_dim').v > DEMO.hd) s.set('rotary_dim', pyInt(String(DEMO.hd)));
  return build(s);
}
function layer(words, m) {  // outputs [L][D]
  var n = words.length, D = DEMO.D, hd = DEMO.hd, x = words.map(function (w) { return gauss(hashSeed(w), D); });
  if (m.kind === 'additive') x = x.map(function (v, p) { var pe = m.row(p); return v.map(function (a, i) { return a + pe[i]; }); });
  function proj(W) { return x.map(function (v) { var o = new Float64Array(D); for (var j = 0; j < D; j++) { var s = 0; for (var i = 0; i < D; i++) s += v[i] * W[i * D + j]; o[j] = s; } return o; }); }
  var q = proj(PROJ[0]), k = proj(PROJ[1]), v = proj(PROJ[2]), out = x.map(function () { return new Float64Array(D); });
  function rot(vec, p, role) {  // rotary: pairs (i, i + R/2) of the head's first R dims (half layout)
    if (m.kind !== 'rotary') return vec;
    var th = m.freqAt(n), R = m.rotaryDim, o = Float64Array.from(vec), h2 = R / 2, a = m.attentionFactor;
    for (var i = 0; i < h2; i++) {
      var c = Math.cos(p * th[i]), s = Math.sin(p * th[i]), sc = m.decay ? Math.exp((role === 'q' ? 1 : -1) * p * m.decay[i]) : 1;
      o[i] = a * sc * (vec[i] * c - vec[i + h2] * s); o[i + h2] = a * sc * (vec[i] * s + vec[i + h2] * c);
    }
    return o;
  }
  for (var h = 0; h < DEMO.H; h++) {
    var qs = q.map(function (r, p) { return rot(r.slice(h * hd, h * hd + hd), p, 'q'); }), ks = k.map(function (r, p) { return rot(r.slice(h * hd, h * hd + hd), p, 'k'); });
    for (var i = 0; i < n; i++) {
      var sc = ks.map(function (kk, j) {  // a relative scheme's whole score (dual_chunk), else q·k plus any bias
        return m.score ? m.score(qs[i], kk, i, j) / Math.sqrt(hd) : dot(qs[i], kk) / Math.sqrt(hd) + (m.kind === 'bias' ? m.bias(h, i, j) : 0);
      });
      var mx = Math.max.apply(null, sc), e = sc.map(function (s) { return Math.exp(s - mx); }), z = e.reduce(function (a, b) { return a + b; }, 0);
      for (var j = 0; j < n; j++) for (var c = 0; c < hd; c++) out[i][h * hd + c] += e[j] / z * v[j][h * hd + c];
    }
  }
  return out;
}
function figOrder(full) {
  var errEl = document.getElementById('order-error'), ta = document.getElementById('sentence-a'), tb = document.getElementById('sentence-b');
  var a = pyStrip(ta.value).split(/\s+/).filter(Boolean), b = pyStrip(tb.value).split(/\s+/).filter(Boolean), msg = '';
  if (!a.length || !b.length) msg = 'type a sentence in both boxes';
  else if (a.length > 40 || b.length > 40) msg = 'at most 40 words per sentence';
  var m;
  if (!msg) { try { m = demoModel(full); } catch (e) { if (!(e instanceof SpecError)) throw e; msg = 'this scheme cannot be built at the demonstration\'s sizes (head_dim 8): ' + e.message; } }
  if (!msg && m.axes > 1) msg = 'the demonstration reads words at positions 0, 1, 2, ...; a grid scheme (axes=' + m.axes + ') takes (row, column) positions: choose axes=1';
  var common = a.filter(function (w, i) { return b.indexOf(w) >= 0 && a.indexOf(w) === i; });
  if (!msg && !common.length) msg = 'the sentences share no word: use the same words in another order';
  errEl.textContent = msg;
  [ta, tb].forEach(function (el) { el.setAttribute('aria-invalid', msg && msg.indexOf('sentence') >= 0 ? 'true' : 'false'); });
  if (msg) return notApplicable('fig-order', msg);
  var oa = layer(a, m), ob = layer(b, m);
  var d = common.map(function (w) { return dist(oa[a.indexOf(w)], ob[b.indexOf(w)]); });
  var g = canvasOf('fig-order'), ctx = g.ctx, X = 110, T = 30, w = g.W - X - 70, top = Math.max.apply(null, d), rowH = Math.min(26, (g.H - T - 30) / common.length);
  title(g, '“' + a.join(' ') + '” vs “' + b.join(' ') + '”: ' + NAMES[full.get('scheme')]);
  var scale = top > 1e-9 ? top : 1;
  common.forEach(function (word, i) {
    var y = T + i * rowH;
    ctx.fillStyle = '#222'; ctx.textAlign = 'right'; ctx.fillText(word + ' (' + a.indexOf(word) + '→' + b.indexOf(word) + ')', X - 6, y + rowH * 0.65);
    ctx.fillStyle = LINES[0]; ctx.fillRect(X, y + 3, Math.max(1, d[i] / scale * w), rowH - 6);
    ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.fillText(d[i] < 1e-9 ? '0 (same output)' : fmtG(d[i], 3), X + Math.max(1, d[i] / scale * w) + 4, y + rowH * 0.65);
  });
  ctx.textAlign = 'center'; ctx.fillText('|output in A − output in B| of the same word (positions A→B)', X + w / 2, g.H - 6);
  var same = d.every(function (x) { return x < 1e-9; });
  document.getElementById('order-note').textContent = !same ? 'The outputs differ: the layer can tell the two orders apart.'
    : a.join(' ') === b.join(' ') ? 'The two sentences are the same: type another order in B.'
    : m.kind === 'none' ? 'Every shared word has the same output in both: the layer sees only a permutation.'
    : m.kind === 'content' ? 'Every shared word has the same output in both: CoPE\'s position embeddings start at zero (CoPE starts '
      + 'as NoPE); what it learns to count is below, in the contextual positions of your sentence.'
    : 'Every shared word has the same output in both, although this scheme encodes position: its term depends only on '
      + 'the distance |i − j|' + (a.slice().reverse().join(' ') === b.join(' ') ? ', and B is A reversed' : '')
      + '. Put a word in front of both sentences (a start token, as real models do) and the outputs differ; only NoPE '
      + 'stays blind to every order.';
  g.c.setAttribute('aria-label', 'distance per shared word: ' + common.map(function (w, i) { return w + ' ' + fmtG(d[i], 3); }).join(', '));
}
