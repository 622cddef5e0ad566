// Drawing on canvas: colour-blind-safe palettes, heatmaps, line charts, colour bars, ticks.
// Okabe-Ito, safe for the common colour-vision deficiencies
var LINES = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000'];
var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
               [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
var DIVERGING = [[5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
                 [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31]];  // RdBu (ColorBrewer)
function palette(stops, t) {
  t = Math.min(Math.max(isFinite(t) ? t : 0.5, 0), 1) * (stops.length - 1);
  var i = Math.min(Math.floor(t), stops.length - 2), f = t - i, a = stops[i], b = stops[i + 1];
  return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
}
var DRAWN = {};  // what each figure last drew (series, colour scales), for the browser tests: posencExplorer.drawn(id)
function canvasOf(id, height) {  // height: the canvas's own height in pixels, when the figure sizes itself
  var c = document.querySelector('#' + id + ' canvas'), ctx = c.getContext('2d');
  document.getElementById(id).hidden = false;
  if (height && c.height !== Math.round(height)) c.height = Math.round(height);
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height);
  ctx.font = '12px system-ui, sans-serif'; ctx.fillStyle = '#222'; ctx.strokeStyle = '#222';
  DRAWN[id] = {hidden: false};
  return {c: c, ctx: ctx, W: c.width, H: c.height};
}
function nice(x) { var a = Math.abs(x); if (a !== 0 && (a < 1e-3 || a >= 1e5)) return fmtG(x, 2); return fmtG(x, 3); }
function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n))), err = (hi - lo) / n / step;
  step *= err >= 5 ? 5 : err >= 2 ? 2 : 1;
  var out = [];
  for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}
function title(g, text) { g.ctx.font = '600 13px system-ui, sans-serif'; g.ctx.textAlign = 'left'; g.ctx.fillText(text, 8, 15); g.ctx.font = '12px system-ui, sans-serif'; }
var notShown = [];
function notApplicable(id, text) {  // a figure that does not apply to this kind is hidden and listed
  var g = canvasOf(id);
  if (id !== 'fig-order' && id !== 'fig-cope') { document.getElementById(id).hidden = true; notShown.push(FIGURE_NAMES[id]); }  // those two hold the reader's input
  g.ctx.fillStyle = '#f3f3f3'; g.ctx.fillRect(0, 0, g.W, g.H); g.ctx.fillStyle = '#555';
  g.ctx.textAlign = 'center'; g.ctx.fillText(text, g.W / 2, g.H / 2);
  g.c.setAttribute('aria-label', text);
  DRAWN[id] = {hidden: document.getElementById(id).hidden, message: text};
}
// series: [{x: [], y: [], label, dash, colour, marks}] (colour: a CSS colour, else LINES by order);
// opts: {title, xlabel, ylabel, logY, yFloor, vlines: [{x, label}]}. The plot area is PLOT_H high and the
// legend sits below it, outside the data, one row per series: the canvas grows with the legend.
var PLOT_H = 190;
function lineChart(id, series, opts) {
  var L = 62, R = 12, T = 26, B = 40, legendH = 15 * series.length + 6;
  var g = canvasOf(id, T + PLOT_H + B + legendH), ctx = g.ctx, w = g.W - L - R, h = PLOT_H;
  series.forEach(function (s, k) { if (!s.colour) s.colour = LINES[k % LINES.length]; if (!s.dash) s.dash = []; });
  title(g, opts.title);
  var xs = [], ys = [];
  series.forEach(function (s) { for (var i = 0; i < s.x.length; i++) { if (isFinite(s.y[i]) && (!opts.logY || s.y[i] > 0)) { xs.push(s.x[i]); ys.push(opts.logY ? Math.log10(s.y[i]) : s.y[i]); } } });
  (opts.vlines || []).forEach(function (v) { xs.push(v.x); });
  var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
  if (opts.yFloor !== undefined) y0 = Math.min(y0, opts.yFloor);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) { y0 -= 0.5; y1 += 0.5; }
  var pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  function X(x) { return L + (x - x0) / (x1 - x0) * w; }
  function Y(y) { return T + h - (y - y0) / (y1 - y0) * h; }
  ctx.strokeStyle = '#e6e6e6'; ctx.fillStyle = '#333'; ctx.textAlign = 'right'; ctx.lineWidth = 1;
  var yt = opts.logY ? ticks(Math.ceil(y0), Math.floor(y1), 5).filter(Number.isInteger) : ticks(y0, y1, 5);
  yt.forEach(function (v) { ctx.beginPath(); ctx.moveTo(L, Y(v)); ctx.lineTo(L + w, Y(v)); ctx.stroke(); ctx.fillText(opts.logY ? '1e' + v : nice(v), L - 4, Y(v) + 4); });
  ctx.textAlign = 'center';
  ticks(x0, x1, 6).forEach(function (v) { ctx.beginPath(); ctx.moveTo(X(v), T); ctx.lineTo(X(v), T + h); ctx.stroke(); ctx.fillText(nice(v), X(v), T + h + 14); });
  ctx.strokeStyle = '#222'; ctx.strokeRect(L, T, w, h);
  ctx.fillText(opts.xlabel, L + w / 2, T + h + 30);
  ctx.save(); ctx.translate(13, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.fillText(opts.ylabel, 0, 0); ctx.restore();
  (opts.vlines || []).forEach(function (v) {
    ctx.save(); ctx.setLineDash([4, 4]); ctx.strokeStyle = '#777'; ctx.beginPath(); ctx.moveTo(X(v.x), T); ctx.lineTo(X(v.x), T + h); ctx.stroke(); ctx.restore();
    ctx.fillStyle = '#555'; ctx.textAlign = 'left'; ctx.fillText(v.label, Math.min(X(v.x) + 3, L + w - 60), T + 12 + 13 * (v.row || 0));
  });
  ctx.save(); ctx.beginPath(); ctx.rect(L, T, w, h); ctx.clip();
  series.forEach(function (s) {
    ctx.strokeStyle = s.colour; ctx.fillStyle = s.colour; ctx.lineWidth = 1.6; ctx.setLineDash(s.dash);
    var step = Math.max(1, Math.floor(s.x.length / 2000));
    ctx.beginPath(); var on = false;
    for (var i = 0; i < s.x.length; i += step) {
      var y = s.y[i];
      if (!isFinite(y) || (opts.logY && !(y > 0))) { on = false; continue; }
      var py = Y(opts.logY ? Math.log10(y) : y);
      if (on) ctx.lineTo(X(s.x[i]), py); else ctx.moveTo(X(s.x[i]), py);
      on = true;
      if (s.marks) ctx.fillRect(X(s.x[i]) - 2, py - 2, 4, 4);
    }
    ctx.stroke();
  });
  ctx.restore(); ctx.setLineDash([]);
  ctx.textAlign = 'left'; ctx.font = '11.5px system-ui, sans-serif';
  var ly = T + h + B + 12;
  series.forEach(function (s) {
    ctx.strokeStyle = s.colour; ctx.lineWidth = 2; ctx.setLineDash(s.dash);
    ctx.beginPath(); ctx.moveTo(L, ly - 4); ctx.lineTo(L + 28, ly - 4); ctx.stroke(); ctx.setLineDash([]);
    if (s.marks) { ctx.fillStyle = s.colour; ctx.fillRect(L + 12, ly - 6, 4, 4); }
    ctx.fillStyle = '#222'; ctx.fillText(s.label, L + 34, ly); ly += 15;
  });
  ctx.lineWidth = 1;
  DRAWN[id] = {hidden: false, title: opts.title, series: series.map(function (s) {
    return {label: s.label, colour: s.colour, dash: s.dash.slice(), scheme: s.scheme || null, x: s.x, y: s.y};
  })};
  g.c.setAttribute('aria-label', opts.title + ': ' + series.map(function (s) { return s.label; }).join('; '));
}
function colourBar(ctx, x, y, h, lo, hi, stops, label) {
  for (var k = 0; k < h; k++) { var c = palette(stops, 1 - k / (h - 1)); ctx.fillStyle = 'rgb(' + c.map(Math.round).join(',') + ')'; ctx.fillRect(x, y + k, 12, 1); }
  ctx.strokeStyle = '#222'; ctx.strokeRect(x, y, 12, h); ctx.fillStyle = '#222'; ctx.textAlign = 'left';
  ticks(lo, hi, 4).forEach(function (v) { var py = y + h - (v - lo) / ((hi - lo) || 1) * h; ctx.fillText(nice(v), x + 15, py + 4); });
  ctx.save(); ctx.translate(x + 62, y + h / 2); ctx.rotate(Math.PI / 2); ctx.textAlign = 'center'; ctx.fillText(label, 0, 0); ctx.restore();
}
// a small colour bar beside one panel, its two ends labelled
function miniBar(ctx, x, y, h, lo, hi, stops) {
  for (var k = 0; k < h; k++) { var c = palette(stops, 1 - k / (h - 1)); ctx.fillStyle = 'rgb(' + c.map(Math.round).join(',') + ')'; ctx.fillRect(x, y + k, 8, 1); }
  ctx.strokeStyle = '#222'; ctx.strokeRect(x, y, 8, h); ctx.fillStyle = '#222'; ctx.textAlign = 'left'; ctx.font = '10.5px system-ui, sans-serif';
  ctx.fillText(nice(hi), x + 11, y + 8); ctx.fillText(nice(lo), x + 11, y + h);
  ctx.font = '12px system-ui, sans-serif';
}
// value(i, j) over an ni × nj grid drawn into (x, y, w, h); returns nothing
function heat(ctx, x, y, w, h, ni, nj, value, lo, hi, stops) {
  var img = ctx.createImageData(Math.max(1, Math.round(w)), Math.max(1, Math.round(h)));
  for (var py = 0; py < img.height; py++) {
    var i = Math.min(ni - 1, Math.floor(py / img.height * ni));
    for (var px = 0; px < img.width; px++) {
      var j = Math.min(nj - 1, Math.floor(px / img.width * nj)), c = palette(stops, (value(i, j) - lo) / ((hi - lo) || 1)), o = 4 * (py * img.width + px);
      img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, Math.round(x), Math.round(y));
}
