// The figures, one function each. A figure gets the schemes drawn: A, and in overlay mode B (the SPEC
// in id="spec-b"), each {tag: 'A' | 'B', full, m, overlay}. A line chart draws every scheme it applies to,
// on the same axes: A in blue and vermillion, solid then dashed; B in green and pink, dash-dot then dotted
// (STYLES), each label prefixed with its scheme. The table and the bias maps draw one block per scheme
// they apply to, B's below A's, each titled with its scheme; the grid map draws the first grid scheme.
// A figure that applies to none of them is hidden and listed in id="not-shown".
var NAMES = {nope: 'NoPE', sinusoidal: 'sinusoidal', rope: 'RoPE', alibi: 'ALiBi', kerple: 'KERPLE', t5: 'T5', cope: 'CoPE',
             dual_chunk: 'Dual Chunk Attention'};
var FIGURE_NAMES = {'fig-table': 'the table', 'fig-similarity': 'similarity vs distance', 'fig-qk': 'q·k vs distance',
                    'fig-wavelengths': 'wavelengths', 'fig-bias': 'bias maps', 'fig-grid': 'the grid map',
                    'fig-cope': 'contextual positions'};
var STYLES = {A: {colours: [LINES[0], LINES[1]], dash: [[], [6, 3]]},
              B: {colours: [LINES[2], LINES[3]], dash: [[9, 3, 2, 3], [2, 2]]}};
// series k (0: the scheme's curve, 1: its bound or its scaled spectrum) of scheme d, labelled with d's SPEC in overlay mode
function styled(d, k, s) {
  s.colour = STYLES[d.tag].colours[k]; s.dash = STYLES[d.tag].dash[k]; s.scheme = d.tag;
  if (d.overlay) s.label = d.tag + ': ' + s.label;  // the SPECs themselves are in id="overlay-note"
  return s;
}
function heatTitle(d, text) { return (d.overlay ? d.tag + ': ' : '') + text; }
function kinds(list) { return list.map(function (d) { return NAMES[d.full.get('scheme')] + ' is ' + (d.m.axes > 1 ? 'a grid scheme' : 'a ' + d.m.kind + ' scheme'); }).join(', '); }
function hasTable(d) { return !(d.m.axes > 1) && (d.m.kind === 'additive' || d.m.kind === 'rotary'); }
var TABLE_H = 300;  // the height of one table's block; in overlay mode B's block is below A's
function figTable(list, L) {
  var shown = list.filter(hasTable);
  if (!shown.length) return notApplicable('fig-table', 'no position table: ' + kinds(list));
  var g = canvasOf('fig-table', TABLE_H * shown.length), ctx = g.ctx, X = 54, w = g.W - X - 90, h = TABLE_H - 26 - 40;
  shown.forEach(function (d, k) {
    var m = d.m, top = k * TABLE_H, T = top + 26, row = m.kind === 'rotary' ? m.tableAt(L) : m.row, cache = {};
    ctx.font = '600 13px system-ui, sans-serif'; ctx.fillStyle = '#222'; ctx.textAlign = 'left';
    ctx.fillText(heatTitle(d, (m.kind === 'rotary' ? 'RoPE rotation table [cos | sin]' : 'sinusoidal table PE(p, i)') + ', ' + L + ' × ' + m.width), 8, top + 15);
    ctx.font = '12px system-ui, sans-serif';
    heat(ctx, X, T, w, h, L, m.width, function (p, i) { var r = cache[p] || (cache[p] = row(p)); return r[i]; }, -1, 1, DIVERGING);
    ctx.strokeStyle = '#222'; ctx.strokeRect(X, T, w, h); ctx.fillStyle = '#222'; ctx.textAlign = 'center';
    ticks(0, m.width - 1, 6).forEach(function (v) { ctx.fillText(nice(v), X + (v + 0.5) / m.width * w, T + h + 14); });
    ctx.fillText('dimension i', X + w / 2, top + TABLE_H - 6); ctx.textAlign = 'right';
    ticks(0, L - 1, 5).forEach(function (v) { ctx.fillText(nice(v), X - 4, T + (v + 0.5) / L * h + 4); });
    ctx.save(); ctx.translate(13, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = 'center'; ctx.fillText('position p', 0, 0); ctx.restore();
    colourBar(ctx, X + w + 12, T, h, -1, 1, DIVERGING, 'value');
  });
  DRAWN['fig-table'] = {hidden: false, schemes: shown.map(function (d) { return d.tag; })};
  g.c.setAttribute('aria-label', shown.map(function (d) { return 'heatmap of the ' + L + ' by ' + d.m.width + ' table' + (d.overlay ? ' of ' + d.tag : ''); }).join('; ') + ', values from -1 (blue) to 1 (red)');
}
function seq(n) { var a = new Array(n); for (var i = 0; i < n; i++) a[i] = i; return a; }
function figSimilarity(list, L) {
  var series = [];
  list.filter(hasTable).forEach(function (d) {
    series.push(styled(d, 0, {x: seq(L), y: analyse(d.m, L).sim, label: 'cos(PE(p), PE(p + r))'}));
  });
  if (!series.length) return notApplicable('fig-similarity', 'no vectors to compare: ' + kinds(list));
  lineChart('fig-similarity', series, {title: 'cosine similarity vs distance', xlabel: 'distance r', ylabel: 'cosine similarity'});
}
// q·k / D and RoFormer's bound share one normalisation: each is divided by its own value at r = 0, so both
// start at 1. (q·k / D at r = 0 is a²·R/D + (D − R)/D, a the attention factor: 1.30 for YaRN's factor 4;
// the bound at 0 is (d/2 + 1)/2. The key numbers print q·k / D itself.)
function figQK(list, L) {
  var series = [];
  list.forEach(function (d) {
    if (d.m.axes > 1 || d.m.kind !== 'rotary') return;
    var an = analyse(d.m, L), s0 = an.score[0], b0 = an.bound[0];
    series.push(styled(d, 0, {x: seq(L), y: Array.from(an.score, function (v) { return v / s0; }), label: 'q·k / D (q = k = 1) ÷ ' + fmtG(s0, 4) + ' (at r = 0)'}));
    series.push(styled(d, 1, {x: seq(L), y: Array.from(an.bound, function (v) { return v / b0; }), label: 'RoFormer bound ÷ ' + fmtG(b0, 4) + ' (at r = 0)'}));
  });
  if (!series.length) return notApplicable('fig-qk', 'q·k vs distance is for rotary schemes (choose rope): ' + kinds(list));
  lineChart('fig-qk', series, {title: 'q·k vs distance and RoFormer\'s decay bound, each ÷ its value at r = 0', xlabel: 'relative distance r', ylabel: 'score ÷ score at r = 0'});
}
function figWavelengths(list, L) {
  var wl = function (t) { return 2 * Math.PI / t; }, series = [], hl = [{y: L, label: 'L = ' + L}], n = 0;
  list.forEach(function (d) {
    var m = d.m, spec;
    if (!m.invFreq) return;
    if (m.kind === 'rotary') {
      spec = m.spectrum();
      series.push(styled(d, 0, {x: seq(spec.before.length), y: Array.from(spec.before, wl), label: spec.type ? 'before scaling' : 'wavelengths', marks: true}));
      if (spec.type) series.push(styled(d, 1, {x: seq(spec.after.length), y: Array.from(spec.after, wl), label: 'after ' + spec.type + (spec.extended && m.scaling.byLength ? ' (at L = ' + spec.extended + ')' : ''), marks: true}));
      var who = d.overlay ? d.tag + ' ' : '';
      if (spec.context) hl.push({y: spec.context, label: who + 'original ' + spec.context});
      if (spec.extended) hl.push({y: spec.extended, label: who + 'extended ' + spec.extended});
    } else series.push(styled(d, 0, {x: seq(m.invFreq.length), y: Array.from(m.invFreq, wl), label: 'sinusoidal', marks: true}));
    n = Math.max(n, m.invFreq.length);
  });
  if (!series.length) return notApplicable('fig-wavelengths', 'no frequencies: ' + kinds(list));
  var GREYS = ['#555555', '#888888', '#aaaaaa', '#777777', '#999999'], DASHES = [[2, 3], [1, 4], [5, 2, 1, 2], [3, 5], [1, 2]];
  hl.forEach(function (h, k) { series.push({x: [0, n - 1], y: [h.y, h.y], label: h.label, dash: DASHES[k % 5], colour: GREYS[k % 5]}); });
  lineChart('fig-wavelengths', series, {title: 'wavelengths 2π/θ_i per pair', xlabel: 'pair i', ylabel: 'wavelength (positions, log)', logY: true});
}
// Every bias drawn here is a function of j − i (ALiBi and KERPLE of |j − i|, T5 of its bucket), so a
// head's n × n map takes its extremes on its 2n − 1 diagonals: O(n) per head, at any length.
function biasRange(m, h, n) {
  if (m.range) return m.range(h, n);  // a relative term that is not a function of j − i (dual_chunk)
  var lo = Infinity, hi = -Infinity;
  for (var r = 1 - n; r < n; r++) { var v = r < 0 ? m.bias(h, -r, 0) : m.bias(h, 0, r); if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}
function scaleOf(lo, hi) {  // a diverging palette, symmetric about 0, for maps of both signs; else viridis
  if (lo < 0 && hi > 0) { var a = Math.max(-lo, hi); return {lo: -a, hi: a, stops: DIVERGING}; }
  return {lo: lo + 0, hi: hi + 0, stops: VIRIDIS};  // + 0: −0 (ALiBi at i = j) is labelled 0
}
// the bias maps over every position 0..L−1 (a pixel shows the first position it covers when L exceeds the
// pixels), a colour scale and bar per head or one for all heads (id="bias-scale")
function figBias(list, L) {
  var shown = list.filter(function (x) { return x.m.kind === 'bias' || x.m.kind === 'relative'; });
  if (!shown.length) return notApplicable('fig-bias', 'no bias maps: ' + kinds(list) + ' (choose alibi, kerple, t5 or dual_chunk)');
  var n = L, perHead = document.getElementById('bias-scale').value !== 'shared', W = 560, X = 8, T = 24, right = perHead ? 0 : 90;
  var blocks = shown.map(function (d) {  // one block of panels per scheme, B's below A's
    var m = d.m, heads = Math.min(m.numHeads, 16), panels = heads + (m.buckets ? 1 : 0), cols = Math.min(panels, panels > 9 ? 4 : 3);
    var pw = (W - X - right) / cols, cell = Math.floor(pw - (perHead ? 62 : 16)), rows = Math.ceil(panels / cols), ranges = [];
    for (var h = 0; h < heads; h++) ranges.push(biasRange(m, h, n));
    var all = scaleOf(Math.min.apply(null, ranges.map(function (r) { return r[0]; })), Math.max.apply(null, ranges.map(function (r) { return r[1]; })));
    return {d: d, heads: heads, panels: panels, cols: cols, pw: pw, cell: cell, height: T + 14 + rows * (cell + 20), ranges: ranges, all: all};
  });
  var g = canvasOf('fig-bias', blocks.reduce(function (a, b) { return a + b.height; }, 0)), ctx = g.ctx, top = 0, out = [];
  blocks.forEach(function (b) {
    var d = b.d, m = d.m, H = m.numHeads, cell = b.cell, heads = [];
    ctx.font = '600 13px system-ui, sans-serif'; ctx.fillStyle = '#222'; ctx.textAlign = 'left';
    ctx.fillText(heatTitle(d, NAMES[d.full.get('scheme')] + (m.kind === 'relative' ? ' term with q = k = 1' : ' bias') + ' per head (query i ↓, key j →), ' + n + ' positions' + (b.heads < H ? ', first ' + b.heads + ' of ' + H + ' heads' : '') + (perHead ? '; a scale per head' : '; one scale')), 8, top + 15);
    ctx.font = '12px system-ui, sans-serif';
    for (var h = 0; h < b.panels; h++) {
      var px = X + (h % b.cols) * b.pw, py = top + T + 14 + Math.floor(h / b.cols) * (cell + 20);
      if (h < b.heads) {
        var sc = perHead ? scaleOf(b.ranges[h][0], b.ranges[h][1]) : b.all;
        heat(ctx, px, py, cell, cell, n, n, (function (hh) { return function (ii, jj) { return m.bias(hh, ii, jj); }; })(h), sc.lo, sc.hi, sc.stops);
        ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.fillText('head ' + h, px, py - 3);
        if (perHead) miniBar(ctx, px + cell + 4, py, cell, sc.lo, sc.hi, sc.stops);
        heads.push({head: h, lo: sc.lo, hi: sc.hi, min: b.ranges[h][0], max: b.ranges[h][1], x: Math.round(px), y: Math.round(py), size: cell});
      } else {
        var nb = m.buckets.count;
        heat(ctx, px, py, cell, cell, n, n, function (ii, jj) { return m.buckets.at(jj - ii); }, 0, nb - 1, VIRIDIS);
        ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.fillText('bucket of j−i (0..' + (nb - 1) + ')', px, py - 3);
        if (perHead) miniBar(ctx, px + cell + 4, py, cell, 0, nb - 1, VIRIDIS);
      }
      ctx.strokeStyle = '#222'; ctx.strokeRect(px, py, cell, cell);
    }
    if (!perHead) colourBar(ctx, g.W - 88, top + T + 14, b.height - T - 40, b.all.lo, b.all.hi, b.all.stops, 'bias');
    out.push({scheme: d.tag, heads: heads});
    top += b.height;
  });
  // the first block's scheme and heads at the top level; every block's in `schemes`
  DRAWN['fig-bias'] = {hidden: false, scheme: out[0].scheme, positions: n, scale: perHead ? 'head' : 'shared', heads: out[0].heads, schemes: out};
  g.c.setAttribute('aria-label', out.map(function (o) {
    return (shown.length > 1 ? o.scheme + ': ' : '') + 'bias maps of ' + o.heads.length + ' heads over ' + n + ' positions, ' + (perHead ? 'each on its own colour scale: ' : 'one colour scale: ') +
      o.heads.map(function (x) { return 'head ' + x.head + ' ' + nice(x.min) + ' to ' + nice(x.max); }).join(', ');
  }).join('; '));
}
function figGrid(list, L, view) {  // analysis.grid_map, drawn as plot.show draws it for --grid
  var d = list.filter(function (x) { return x.m.axes > 1; })[0];
  if (!d) return notApplicable('fig-grid', 'the grid map is for schemes with several axes (e.g. sinusoidal:axes=2, rope:axes=2)');
  var m = d.m, full = d.full;
  var g = canvasOf('fig-grid'), ctx = g.ctx, H = view.grid[0], W = view.grid[1], pr = view.patch[0], pc = view.patch[1];
  var v = gridValues(m, H, W, pr, pc), T = 30, X = 54, side = Math.min((g.W - X - 100) / W, (g.H - T - 44) / H);
  var w = side * W, h = side * H;
  title(g, heatTitle(d, NAMES[full.get('scheme')] + ' (axes=' + m.axes + '), ' + H + ' × ' + W + ' patches: signal with patch (' + pr + ', ' + pc + ')'));
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
