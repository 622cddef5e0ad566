// Controls, the URL fragment state (#spec=SPEC&length=L&dim=D&heads=H, and for a grid scheme
// &grid=HxW&patch=R,C as `posenc show --grid/--patch` takes them) and error messages.
var $ = function (id) { return document.getElementById(id); };
var SIZE = ['length', 'dim', 'heads'];
var state = {spec: null, full: null, sizes: null};
var CHOICES = {layout: ['half', 'interleaved'], variant: ['log', 'power'], convention: SCHEMA.cope.conventions};  // a select each
var SLIDERS = {base: [10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 500000, 1000000, 10000000],
               factor: [1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64]};
function setError(id, msg) {
  var el = $(id + '-error'), input = $(id);
  el.textContent = msg || '';
  if (input) input.setAttribute('aria-invalid', msg ? 'true' : 'false');
}
function readSize(name) {
  var text = pyStrip($(name).value), b = SCHEMA.bounds[name];
  var label = '--' + name;
  if (!RE_INT.test(text)) throw new SpecError(label + ' must be an integer from ' + b[0] + ' to ' + b[1] + ', got ' + strRepr($(name).value), name);
  var v = Number(text);
  if (v < b[0] || v > b[1]) throw new SpecError(label + ' must be an integer from ' + b[0] + ' to ' + b[1] + ', got ' + v, name);
  return v;
}
// `posenc show --grid HxW --patch R,C` (commands/inspect._pair, analysis.grid_map's check); null patch: the centre
function readPair(name, sep, low) {
  var text = $(name).value, parts = text.toLowerCase().split(sep), hi = SCHEMA.grid.max;
  if (parts.length !== 2 || !parts.every(function (p) { return /^\s*[+-]?\d+\s*$/.test(p); }))
    throw new SpecError('--' + name + ' must be two integers as A' + sep + 'B (e.g. 14' + sep + '14), got ' + strRepr(text), name);
  var v = parts.map(Number);
  if (!v.every(function (x) { return x >= low && x <= hi; })) throw new SpecError('--' + name + ' sizes must be integers from ' + low + ' to ' + hi + ', got ' + strRepr(text), name);
  return v;
}
function readView() {
  var grid = readPair('grid', 'x', 1), patch = [Math.floor(grid[0] / 2), Math.floor(grid[1] / 2)];
  if (pyStrip($('patch').value)) {
    patch = readPair('patch', ',', 0);
    if (!(patch[0] < grid[0] && patch[1] < grid[1])) throw new SpecError('patch must lie inside the grid ' + grid[0] + '×' + grid[1] + ', got (' + patch[0] + ', ' + patch[1] + ')', 'patch');
  }
  return {grid: grid, patch: patch};
}
function schemeOptions() {
  var sel = $('scheme');
  Object.keys(SCHEMES).forEach(function (n) { var o = document.createElement('option'); o.value = n; o.textContent = n + ' (' + SCHEMA.schemes[n].kind + ')'; sel.appendChild(o); });
}
// one labelled control per non-size parameter of the scheme (and of its scaling type)
function paramControls(given) {
  var box = $('param-controls'), name = given.get('scheme');
  box.textContent = '';
  var params = PARAMS[name], sc = given.get('scaling');
  function add(key, value, dflt, scaled) {
    var id = 'param-' + key, div = document.createElement('div'), lab = document.createElement('label');
    div.className = 'control';
    lab.htmlFor = id; lab.textContent = key + (scaled ? ' (scaling)' : '');
    div.appendChild(lab);
    var input;
    if (CHOICES[key]) {
      input = document.createElement('select');
      CHOICES[key].forEach(function (o) { var op = document.createElement('option'); op.value = o; op.textContent = o; input.appendChild(op); });
      input.value = value === undefined ? dflt : value;
    } else {
      input = document.createElement('input');
      input.type = 'text'; input.spellcheck = false;
      input.value = value === undefined ? '' : pyStr(value);
      input.placeholder = dflt === REQUIRED ? 'required' : pyStr(dflt);
    }
    input.id = id; input.dataset.key = key; input.dataset.scaled = scaled ? '1' : '';
    input.setAttribute('aria-describedby', id + '-error');
    div.appendChild(input);
    var err = document.createElement('span');
    err.id = id + '-error'; err.className = 'error'; err.setAttribute('role', 'alert');
    if (SLIDERS[key]) {
      var sl = document.createElement('input'), sid = id + '-slider', sl2 = document.createElement('label');
      sl.type = 'range'; sl.min = 0; sl.max = SLIDERS[key].length - 1; sl.step = 1; sl.id = sid;
      sl2.htmlFor = sid; sl2.className = 'sr'; sl2.textContent = key + ' slider';
      var cur = value !== undefined && isNum(value) ? value.v : (isNum(dflt) ? dflt.v : SLIDERS[key][0]), best = 0;
      SLIDERS[key].forEach(function (x, i) { if (Math.abs(Math.log(x / cur)) < Math.abs(Math.log(SLIDERS[key][best] / cur))) best = i; });
      sl.value = best;
      sl.addEventListener('input', function () { input.value = String(SLIDERS[key][Number(sl.value)]); fromControls(); });
      div.appendChild(sl2); div.appendChild(sl);
    }
    div.appendChild(err);
    input.addEventListener(input.tagName === 'SELECT' ? 'change' : 'input', fromControls);
    box.appendChild(div);
  }
  params.forEach(function (d, key) {
    if (SCHEMA.size_params.indexOf(key) >= 0) return;
    if (key === 'scaling') {
      var div = document.createElement('div'), lab = document.createElement('label'), sel = document.createElement('select');
      div.className = 'control'; lab.htmlFor = 'param-scaling'; lab.textContent = 'scaling type'; sel.id = 'param-scaling';
      ['none'].concat(Object.keys(SCHEMA.scalings)).forEach(function (o) { var op = document.createElement('option'); op.value = o; op.textContent = o; sel.appendChild(op); });
      sel.value = isDict(sc) && SCHEMA.scalings[sc.get('type')] ? sc.get('type') : 'none';
      sel.addEventListener('change', function () { fromControls(true); });
      div.appendChild(lab); div.appendChild(sel); box.appendChild(div);
      return;
    }
    add(key, given.has(key) ? given.get(key) : undefined, d, false);
  });
  if (isDict(sc) && SCALING_PARAMS[sc.get('type')]) {
    SCALING_PARAMS[sc.get('type')].forEach(function (d, key) { add(key, sc.has(key) ? sc.get(key) : undefined, d, true); });
  }
  if (!box.children.length) box.textContent = 'none besides the sizes above';
}
// the SPEC the controls describe: the scheme, its non-empty parameters, the SPEC's explicit sizes
function fromControls(scalingChanged) {
  var name = $('scheme').value, parts = [], prev = state.spec;
  if (prev && prev.get('scheme') === name) SCHEMA.size_params.forEach(function (k) { if (prev.has(k)) parts.push(k + '=' + pyStr(prev.get(k))); });
  var type = $('param-scaling') ? $('param-scaling').value : 'none';
  Array.prototype.forEach.call($('param-controls').querySelectorAll('[data-key]'), function (el) {
    var v = pyStrip(el.value);
    if (el.dataset.scaled && (scalingChanged === true || type === 'none')) return;
    if (el.tagName === 'SELECT' && PARAMS[name].get(el.dataset.key) === v) return;
    if (v) parts.push(el.dataset.key + '=' + v);
  });
  if (type !== 'none') {
    parts.push('scaling=' + type);
    if (scalingChanged === true) {  // a new type: its required parameters, with values that work
      var ex = {factor: '4', original_max_positions: '4096'};
      SCALING_PARAMS[type].forEach(function (d, k) {
        if (d !== REQUIRED) return;
        if (ex[k]) parts.push(k + '=' + ex[k]);
        else if (k === 'short_factor' || k === 'long_factor') {
          var dim = state.full && state.full.get('head_dim') ? state.full.get('head_dim').v : readSizeSafe('dim');
          var rd = state.full && isInt(state.full.get('rotary_dim')) ? state.full.get('rotary_dim').v : dim;
          var n = Math.max(1, Math.floor(rd / 2)), vals = [];
          for (var i = 0; i < n; i++) vals.push(k === 'short_factor' ? '1.0' : floatRepr(1 + 3 * i / Math.max(1, n - 1)));
          parts.push(k + '=[' + vals.join(',') + ']');
        }
      });
    }
  }
  // scaling keys go after scaling=TYPE, where the SPEC parser routes them
  var main = parts.filter(function (p) { var k = p.split('=')[0]; return !(SCALING_PARAMS[type] && SCALING_PARAMS[type].has(k) && !PARAMS[name].has(k)); });
  var scal = parts.filter(function (p) { return main.indexOf(p) < 0; });
  $('spec').value = name + (main.length + scal.length ? ':' + main.concat(scal).join(',') : '');
  update({rebuildControls: scalingChanged === true});
}
// a message about one parameter also shows next to that parameter's control
function paramError(message) {
  var m = /^(?:scaling '\w+': )?(?:cannot read )?([A-Za-z_]\w*)(?:\[\d+\])?(?: must|=| needs| entries)/.exec(message || '');
  Array.prototype.forEach.call(document.querySelectorAll('#param-controls [data-key]'), function (el) {
    var mine = !!m && el.dataset.key === m[1];
    document.getElementById(el.id + '-error').textContent = mine ? message : '';
    el.setAttribute('aria-invalid', mine ? 'true' : 'false');
  });
}
function readSizeSafe(name) { try { return readSize(name); } catch (e) { return SCHEMA.defaults[name]; } }
var renders = 0, lastGood = null;
function update(opt) {
  opt = opt || {};
  var sizes = {}, bad = false, given = null, full = null, specMessage = '', model = null, view = null;
  SIZE.forEach(function (n) {
    try { sizes[n] = readSize(n); setError(n, ''); $(n + '-slider').value = Math.min(sizes[n], Number($(n + '-slider').max)); }
    catch (e) { if (!(e instanceof SpecError)) throw e; setError(n, e.message); bad = true; }
  });
  try {
    given = parseSpec($('spec').value);
    if (!bad) { full = fullSpec(given, sizes); model = build(full); }
    setError('spec', '');
  } catch (e) {
    if (!(e instanceof SpecError)) throw e;
    setError('spec', e.message); bad = true; specMessage = e.message;
  }
  if (given) {
    var changed = !state.spec || state.spec.get('scheme') !== given.get('scheme') || opt.rebuildControls || opt.fromSpec;
    state.spec = given;
    $('scheme').value = given.get('scheme');
    $('scheme-summary').textContent = SCHEMA.schemes[given.get('scheme')].summary;
    if (changed) paramControls(given);
  }
  paramError(specMessage);
  setError('grid', ''); setError('patch', '');
  try { view = readView(); } catch (e) {
    if (!(e instanceof SpecError)) throw e;
    setError(e.control, e.message);
    if (model && model.axes > 1) bad = true;  // the grid controls matter for grid schemes only
  }
  if (view) {
    $('patch-row-slider').max = view.grid[0] - 1; $('patch-col-slider').max = view.grid[1] - 1;
    $('patch-row-slider').value = view.patch[0]; $('patch-col-slider').value = view.patch[1];
  }
  if (bad) {
    $('status').textContent = lastGood ? 'Fix the value marked in red; the figures and numbers show the last valid view.' : 'Fix the value marked in red.';
    document.documentElement.setAttribute('data-valid', '0');
    return;
  }
  state.full = full; state.sizes = sizes; state.view = model.axes > 1 ? view : null;
  var token = ++pending, width = model.width || 0;
  if (width * sizes.length <= BIG) {
    $('status').textContent = '';
    render(full, sizes, state.view);
    writeHash();
    return;
  }
  // a large table (up to the command line's 16384 × 4096) takes seconds: say so, then compute
  $('status').textContent = 'Computing ' + sizes.length + ' positions × ' + width + ' dimensions…';
  setTimeout(function () {
    if (token !== pending) return;  // a newer change supersedes this one
    render(full, sizes, state.view);
    $('status').textContent = '';
    writeHash();
  }, 30);
}
var pending = 0, BIG = 1 << 21;  // about 0.1 s of cos/sin in V8 (measured: 16384 × 4096 takes ~9 s)
function render(full, sizes, view) {
  var L = sizes.length, m = build(full);
  var numbers = keyNumbers(full, L, m, view, sizes.heads), body = document.querySelector('#key-numbers tbody');
  body.textContent = '';
  numbers.forEach(function (kv) { var tr = document.createElement('tr'); kv.forEach(function (c) { var td = document.createElement('td'); td.textContent = c; tr.appendChild(td); }); body.appendChild(tr); });
  $('show-command').textContent = 'posenc show ' + shellQuote(pyStrip($('spec').value)) +
    (view ? ' --grid ' + view.grid.join('x') + ' --patch ' + view.patch.join(',') : '') + ' --length ' + L + ' --dim ' + sizes.dim + ' --heads ' + sizes.heads;
  var figs = [['fig-table', figTable], ['fig-similarity', figSimilarity], ['fig-qk', figQK], ['fig-wavelengths', figWavelengths], ['fig-bias', figBias], ['fig-grid', figGrid]];
  notShown = [];
  figs.forEach(function (f) { f[1](m, full, L, view); });
  $('not-shown').textContent = notShown.length ? 'Not drawn for ' + NAMES[full.get('scheme')] + ' (' + m.kind + '): ' + notShown.join(', ') + '.' : '';
  figOrder(full);
  figCope(full);
  lastGood = {full: full, sizes: sizes};
  renders += 1;
  document.documentElement.setAttribute('data-renders', String(renders));
  document.documentElement.setAttribute('data-valid', '1');
}
function shellQuote(s) { return /^[A-Za-z0-9_:=,.\-+]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }
var written = null;
function writeHash() {
  var h = '#spec=' + encodeURIComponent(pyStrip($('spec').value)) + SIZE.map(function (n) { return '&' + n + '=' + encodeURIComponent(pyStrip($(n).value)); }).join('');
  if (state.view) h += '&grid=' + state.view.grid.join('x') + (pyStrip($('patch').value) ? '&patch=' + state.view.patch.join(',') : '');
  if (location.hash === h) return;
  written = h;
  try { history.replaceState(null, '', h); } catch (e) { location.hash = h; }
}
function readHash() {
  var vals = {spec: SCHEMA.defaults.spec, length: String(SCHEMA.defaults.length), dim: String(SCHEMA.defaults.dim), heads: String(SCHEMA.defaults.heads),
              grid: SCHEMA.grid['default'].join('x'), patch: ''}, problem = '';
  location.hash.replace(/^#/, '').split('&').forEach(function (part) {
    if (!part) return;
    var eq = part.indexOf('='), k = eq < 0 ? part : part.slice(0, eq), v = eq < 0 ? '' : part.slice(eq + 1);
    if (!(k in vals)) { problem = 'the address has an unknown field ' + strRepr(k) + ' (allowed: spec, length, dim, heads, grid, patch)'; return; }
    try { vals[k] = decodeURIComponent(v); } catch (e) { problem = 'the address field ' + k + ' is not valid URL encoding'; }
  });
  $('spec').value = vals.spec;
  SIZE.concat(['grid', 'patch']).forEach(function (n) { $(n).value = vals[n]; });
  update({fromSpec: true});
  if (problem) $('status').textContent = problem + '. ' + $('status').textContent;
}
function init() {
  schemeOptions();
  $('spec').addEventListener('input', function () { update({fromSpec: true}); });
  $('scheme').addEventListener('change', function () { $('spec').value = $('scheme').value; state.spec = null; update({fromSpec: true}); });
  SIZE.forEach(function (n) {
    $(n).addEventListener('input', function () { update(); });
    $(n + '-slider').addEventListener('input', function () { $(n).value = $(n + '-slider').value; update(); });
  });
  ['grid', 'patch'].forEach(function (n) { $(n).addEventListener('input', function () { update(); }); });
  ['patch-row-slider', 'patch-col-slider'].forEach(function (n) {
    $(n).addEventListener('input', function () { $('patch').value = $('patch-row-slider').value + ',' + $('patch-col-slider').value; update(); });
  });
  ['sentence-a', 'sentence-b'].forEach(function (id) { $(id).addEventListener('input', function () { if (lastGood) figOrder(lastGood.full); }); });
  $('cope-sentence').value = SCHEMA.cope.sentence;
  $('cope-sentence').addEventListener('input', function () { if (lastGood) figCope(lastGood.full); });
  $('cope-marks').addEventListener('change', function () { if (lastGood) figCope(lastGood.full); });
  window.addEventListener('hashchange', function () { if (location.hash !== written) readHash(); });
  readHash();
}
// what the browser tests (and a console) can call: the same functions the page uses
globalThis.posencExplorer = {parseSpec: parseSpec, fullSpec: fullSpec, keyNumbers: keyNumbers, pyRepr: pyRepr,
                             copePositions: function (text, marks, nposMax) { return Array.from(copePositions(text, marks, nposMax)); },
                             fmtF: fmtF, fmtE: fmtE, fmtG: fmtG, floatRepr: floatRepr, SpecError: SpecError,
                             gridValues: function (full, h, w, r, c) { return Array.from(gridValues(build(full), h, w, r, c)); }};
if (typeof document !== 'undefined' && document.getElementById('controls')) init();
