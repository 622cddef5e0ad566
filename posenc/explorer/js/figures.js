// The figures, one function each; a figure that does not apply to the scheme's kind is hidden.
var NAMES = {nope: 'NoPE', sinusoidal: 'sinusoidal', rope: 'RoPE', alibi: 'ALiBi', kerple: 'KERPLE', t5: 'T5', cope: 'CoPE'};
var FIGURE_NAMES = {'fig-table': 'the table', 'fig-similarity': 'similarity vs distance', 'fig-qk': 'q·k vs distance',
                    'fig-wavelengths': 'wavelengths', 'fig-bias': 'bias maps', 'fig-grid': 'the grid map',
                    'fig-cope': 'contextual positions'};
function gridOnly(id, m) { return notApplicable(id, 'a grid scheme (axes=' + m.axes + '): see each patch\'s signal on the grid'); }
function figTable(m, full, L) {
  if (m.axes > 1) return gridOnly('fig-table', m);
  if (m.kind !== 'additive' && m.kind !== 'rotary') return notApplicable('fig-table', 'no position table: ' + NAMES[full.get('scheme')] + ' is a ' + m.kind + ' scheme');
  var g = canvasOf('fig-table'), ctx = g.ctx, X = 54, T = 26, w = g.W - X - 90, h = g.H - T - 40;
  var row = m.kind === 'rotary' ? m.tableAt(L) : m.row, cache = {};
  title(g, (m.kind === 'rotary' ? 'RoPE rotation table [cos | sin]' : 'sinusoidal table PE(p, i)') + ', ' + L + ' × ' + m.width);
  heat(ctx, X, T, w, h, L, m.width, function (p, i) { var r = cache[p] || (cache[p] = row(p)); return r[i]; }, -1, 1, DIVERGING);
  ctx.strokeStyle = '#222'; ctx.strokeRect(X, T, w, h); ctx.fillStyle = '#222'; ctx.textAlign = 'center';
  ticks(0, m.width - 1, 6).forEach(function (v) { ctx.fillText(nice(v), X + (v + 0.5) / m.width * w, T + h + 14); });
  ctx.fillText('dimension i', X + w / 2, g.H - 6); ctx.textAlign = 'right';
  ticks(0, L - 1, 5).forEach(function (v) { ctx.fillText(nice(v), X - 4, T + (v + 0.5) / L * h + 4); });
  ctx.save(); ctx.translate(13, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = 'center'; ctx.fillText('position p', 0, 0); ctx.restore();
  colourBar(ctx, X + w + 12, T, h, -1, 1, DIVERGING, 'value');
  g.c.setAttribute('aria-label', 'heatmap of the ' + L + ' by ' + m.width + ' table, values from -1 (blue) to 1 (red)');
}
function seq(n) { var a = new Array(n); for (var i = 0; i < n; i++) a[i] = i; return a; }
function figSimilarity(m, full, L) {
  if (m.axes > 1) return gridOnly('fig-similarity', m);
  if (m.kind !== 'additive' && m.kind !== 'rotary') return notApplicable('fig-similarity', 'no vectors to compare: ' + NAMES[full.get('scheme')] + ' is a ' + m.kind + ' scheme');
  var sim = analyse(m, L).sim;
  lineChart('fig-similarity', [{x: seq(L), y: sim, label: 'cos(PE(p), PE(p + r))'}],
    {title: 'cosine similarity vs distance', xlabel: 'distance r', ylabel: 'cosine similarity'});
}
function figQK(m, full, L) {
  if (m.axes > 1) return gridOnly('fig-qk', m);
  if (m.kind !== 'rotary') return notApplicable('fig-qk', 'q·k vs distance is for rotary schemes (choose rope)');
  var an = analyse(m, L), sc = an.score, b = an.bound, b0 = b[0];
  lineChart('fig-qk', [{x: seq(L), y: sc, label: 'q·k / D (q = k = 1)'}, {x: seq(L), y: b.map(function (v) { return v / b0; }), label: 'RoFormer bound, ÷ its value at r = 0', dash: [6, 3]}],
    {title: 'q·k vs distance, RoFormer decay bound', xlabel: 'relative distance r', ylabel: 'score'});
}
function figWavelengths(m, full, L) {
  if (!m.invFreq) return notApplicable('fig-wavelengths', 'no frequencies: ' + NAMES[full.get('scheme')] + ' is a ' + m.kind + ' scheme');
  var wl = function (t) { return 2 * Math.PI / t; }, series, v = [{x: 0, label: 'L = ' + L, row: 0}], spec;
  if (m.kind === 'rotary') {
    spec = m.spectrum();
    series = [{x: seq(spec.before.length), y: Array.from(spec.before, wl), label: 'before scaling', marks: true}];
    if (spec.type) series.push({x: seq(spec.after.length), y: Array.from(spec.after, wl), label: 'after ' + spec.type + (spec.extended && m.scaling.byLength ? ' (at L = ' + spec.extended + ')' : ''), dash: [6, 3], marks: true});
  } else series = [{x: seq(m.invFreq.length), y: Array.from(m.invFreq, wl), label: 'sinusoidal', marks: true}];
  var hl = [{y: L, label: 'L = ' + L}];
  if (spec && spec.context) hl.push({y: spec.context, label: 'original ' + spec.context});
  if (spec && spec.extended) hl.push({y: spec.extended, label: 'extended ' + spec.extended});
  hl.forEach(function (h) { series.push({x: [0, series[0].x.length - 1], y: [h.y, h.y], label: h.label, dash: [2, 3]}); });
  lineChart('fig-wavelengths', series, {title: 'wavelengths 2π/θ_i per pair', xlabel: 'pair i', ylabel: 'wavelength (positions, log)', logY: true, legendLeft: true});
}
function figBias(m, full, L) {
  if (m.kind !== 'bias') return notApplicable('fig-bias', 'no bias maps: ' + NAMES[full.get('scheme')] + ' is a ' + m.kind + ' scheme (choose alibi, kerple or t5)');
  var g = canvasOf('fig-bias'), ctx = g.ctx, n = Math.min(L, 64), H = m.numHeads, shown = Math.min(H, 16);
  var panels = shown + (m.buckets ? 1 : 0), cols = Math.ceil(Math.sqrt(panels * 1.6)), rowsN = Math.ceil(panels / cols);
  var T = 24, X = 8, cell = Math.min((g.W - 110) / cols, (g.H - T - 10) / rowsN) - 16;
  var lo = Infinity, hi = -Infinity, h, i, j;
  for (h = 0; h < shown; h++) for (i = 0; i < n; i++) for (j = 0; j < n; j++) { var v = m.bias(h, i, j); lo = Math.min(lo, v); hi = Math.max(hi, v); }
  var stops = lo < 0 && hi > 0 ? DIVERGING : VIRIDIS;
  if (stops === DIVERGING) { var a = Math.max(-lo, hi); lo = -a; hi = a; }
  title(g, NAMES[full.get('scheme')] + ' bias per head, query i (down) × key j (across), ' + n + ' positions' + (shown < H ? ', first ' + shown + ' of ' + H + ' heads' : ''));
  for (h = 0; h < panels; h++) {
    var px = X + (h % cols) * (cell + 16), py = T + 14 + Math.floor(h / cols) * (cell + 16);
    if (h < shown) {
      heat(ctx, px, py, cell, cell, n, n, (function (hh) { return function (ii, jj) { return m.bias(hh, ii, jj); }; })(h), lo, hi, stops);
      ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.fillText('head ' + h, px, py - 3);
    } else {
      var nb = m.buckets.count;
      heat(ctx, px, py, cell, cell, n, n, function (ii, jj) { return m.buckets.at(jj - ii); }, 0, nb - 1, VIRIDIS);
      ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.fillText('bucket of j−i (0..' + (nb - 1) + ')', px, py - 3);
    }
    ctx.strokeStyle = '#222'; ctx.strokeRect(px, py, cell, cell);
  }
  colourBar(ctx, g.W - 88, T + 14, g.H - T - 40, lo, hi, stops, 'bias');
  g.c.setAttribute('aria-label', 'bias maps of ' + shown + ' heads over ' + n + ' positions, from ' + nice(lo) + ' to ' + nice(hi));
}
function figGrid(m, full, L, view) {  // analysis.grid_map, drawn as plot.show draws it for --grid
  if (!(m.axes > 1)) return notApplicable('fig-grid', 'the grid map is for schemes with several axes (e.g. sinusoidal:axes=2, rope:axes=2)');
  var g = canvasOf('fig-grid'), ctx = g.ctx, H = view.grid[0], W = view.grid[1], pr = view.patch[0], pc = view.patch[1];
  var v = gridValues(m, H, W, pr, pc), T = 30, X = 54, side = Math.min((g.W - X - 100) / W, (g.H - T - 44) / H);
  var w = side * W, h = side * H;
  title(g, NAMES[full.get('scheme')] + ' (axes=' + m.axes + '), ' + H + ' × ' + W + ' patches: signal with patch (' + pr + ', ' + pc + ')');
  heat(ctx, X, T, w, h, H, W, function (r, c) { return v[r * W + c]; }, -1, 1, DIVERGING);
  ctx.strokeStyle = '#222'; ctx.strokeRect(X, T, w, h);
  ctx.lineWidth = 2; ctx.strokeStyle = '#000'; ctx.strokeRect(X + pc * side, T + pr * side, side, side);  // the chosen patch:
  ctx.strokeStyle = '#fff'; ctx.strokeRect(X + pc * side + 2, T + pr * side + 2, side - 4, side - 4); ctx.lineWidth = 1;  // black and white, seen on any colour
  ctx.fillStyle = '#222'; ctx.textAlign = 'center';
  ticks(0, W - 1, 6).forEach(function (c) { ctx.fillText(nice(c), X + (c + 0.5) * side, T + h + 14); });
  ctx.fillText('column c', X + w / 2, T + h + 30); ctx.textAlign = 'right';
  ticks(0, H - 1, 6).forEach(function (r) { ctx.fillText(nice(r), X - 4, T + (r + 0.5) * side + 4); });
  ctx.save(); ctx.translate(13, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = 'center'; ctx.fillText('row r', 0, 0); ctx.restore();
  colourBar(ctx, X + w + 12, T, h, -1, 1, DIVERGING, SCHEMA.grid.quantity[m.kind].replace(' (mean over heads)', ''));
  g.c.setAttribute('aria-label', 'heatmap of ' + H + ' by ' + W + ' patches: ' + SCHEMA.grid.quantity[m.kind] + ' with patch (' + pr + ', ' + pc + '), from -1 (blue) to 1 (red)');
}
