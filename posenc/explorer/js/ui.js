// Controls, the URL fragment state (#spec=SPEC&length=L&dim=D&heads=H, in overlay mode &spec-b=SPEC
// after spec, and for a grid scheme &grid=HxW&patch=R,C as `posenc show --grid/--patch` takes them) and
// error messages. The fragment is read strictly: known fields only, each once, as field=URL-encoded
// text; every value then goes through the same checks as a typed one (nothing in it is ever run).
var $ = function (id) { return document.getElementById(id); };
var SIZE = ['length', 'dim', 'heads'];
var state = {spec: null, full: null, sizes: null, fullB: null};
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
  var sizes = {}, bad = false, given = null, full = null, specMessage = '', model = null, view = null, fullB = null, modelB = null;
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
  try {  // overlay mode: a second SPEC, drawn on the same figures (empty: none)
    if (pyStrip($('spec-b').value)) { var givenB = parseSpec($('spec-b').value); if (!bad) { fullB = fullSpec(givenB, sizes); modelB = build(fullB); } }
    setError('spec-b', '');
  } catch (e) {
    if (!(e instanceof SpecError)) throw e;
    setError('spec-b', 'SPEC B: ' + e.message); bad = true;
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
    if ((model && model.axes > 1) || (modelB && modelB.axes > 1)) bad = true;  // the grid controls matter for grid schemes only
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
  var grid = model.axes > 1 || !!(modelB && modelB.axes > 1);
  $('grid-controls').hidden = !grid;  // the grid controls show for grid schemes only
  state.full = full; state.fullB = fullB; state.sizes = sizes; state.view = grid ? view : null;
  var token = ++pending, width = Math.max(model.width || 0, modelB && modelB.width || 0);
  if (width * sizes.length <= BIG) {
    $('status').textContent = '';
    render(full, fullB, sizes, state.view);
    writeHash();
    return;
  }
  // a large table (up to the command line's 16384 × 4096) takes seconds: say so, then compute
  $('status').textContent = 'Computing ' + sizes.length + ' positions × ' + width + ' dimensions…';
  setTimeout(function () {
    if (token !== pending) return;  // a newer change supersedes this one
    render(full, fullB, sizes, state.view);
    $('status').textContent = '';
    writeHash();
  }, 30);
}
var pending = 0, BIG = 1 << 21;  // about 0.1 s of cos/sin in V8 (measured: 16384 × 4096 takes ~9 s)
// the key numbers of one SPEC into a table, and the `posenc show` command that prints them
function showNumbers(full, m, sizes, view, tableId, commandId, text) {
  var L = sizes.length, v = m.axes > 1 ? view : null, body = document.querySelector('#' + tableId + ' tbody');
  body.textContent = '';
  keyNumbers(full, L, m, v, sizes.heads).forEach(function (kv) { var tr = document.createElement('tr'); kv.forEach(function (c) { var td = document.createElement('td'); td.textContent = c; tr.appendChild(td); }); body.appendChild(tr); });
  $(commandId).textContent = 'posenc show ' + shellQuote(text) +
    (v ? ' --grid ' + v.grid.join('x') + ' --patch ' + v.patch.join(',') : '') + ' --length ' + L + ' --dim ' + sizes.dim + ' --heads ' + sizes.heads;
}
function render(full, fullB, sizes, view) {
  var L = sizes.length, m = build(full), mB = fullB ? build(fullB) : null;
  var list = [{tag: 'A', full: full, m: m, text: pyStrip($('spec').value), overlay: !!fullB}];
  if (fullB) list.push({tag: 'B', full: fullB, m: mB, text: pyStrip($('spec-b').value), overlay: true});
  showNumbers(full, m, sizes, view, 'key-numbers', 'show-command', list[0].text);
  $('overlay-numbers').hidden = !fullB;
  if (fullB) showNumbers(fullB, mB, sizes, view, 'key-numbers-b', 'show-command-b', list[1].text);
  var figs = [['fig-table', figTable], ['fig-similarity', figSimilarity], ['fig-qk', figQK], ['fig-wavelengths', figWavelengths], ['fig-bias', figBias], ['fig-grid', figGrid]];
  notShown = [];
  figs.forEach(function (f) { f[1](list, L, view); });
  var cope = list.filter(function (d) { return d.m.kind === 'content'; })[0];
  if (!cope) notShown.push(FIGURE_NAMES['fig-cope']);
  $('not-shown').textContent = notShown.length ? 'Not drawn for ' + list.map(function (d) { return (fullB ? d.tag + ' ' : '') + NAMES[d.full.get('scheme')] + ' (' + (d.m.axes > 1 ? 'grid' : d.m.kind) + ')'; }).join(' and ') + ': ' + notShown.join(', ') + '.' : '';
  $('overlay-note').textContent = fullB ? 'Overlay: A = ' + list[0].text + ' (solid, blue and vermillion), B = ' + list[1].text + ' (dash-dot and dotted, green and pink) on the same line charts; '
    + 'the table and the bias maps draw A above B; the grid map draws the first grid scheme; "dog bites man" reads A.' : '';
  figOrder(full);
  lastGood = {full: full, fullB: fullB, sizes: sizes, cope: cope ? cope.full : null};
  figCope(lastGood.cope);
  renders += 1;
  document.documentElement.setAttribute('data-renders', String(renders));
  document.documentElement.setAttribute('data-valid', '1');
}
function shellQuote(s) { return /^[A-Za-z0-9_:=,.\-+]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }
var written = null;
function writeHash() {
  var b = pyStrip($('spec-b').value);
  var h = '#spec=' + encodeURIComponent(pyStrip($('spec').value)) + (b ? '&spec-b=' + encodeURIComponent(b) : '') + SIZE.map(function (n) { return '&' + n + '=' + encodeURIComponent(pyStrip($(n).value)); }).join('');
  if (state.view) h += '&grid=' + state.view.grid.join('x') + (pyStrip($('patch').value) ? '&patch=' + state.view.patch.join(',') : '');
  if (location.hash === h) return;
  written = h;
  try { history.replaceState(null, '', h); } catch (e) { location.hash = h; }
}
var HASH_FIELDS = ['spec', 'spec-b', 'length', 'dim', 'heads', 'grid', 'patch'];
function readHash() {
  var vals = {spec: SCHEMA.defaults.spec, 'spec-b': '', length: String(SCHEMA.defaults.length), dim: String(SCHEMA.defaults.dim), heads: String(SCHEMA.defaults.heads),
              grid: SCHEMA.grid['default'].join('x'), patch: ''}, problem = '', seen = {};
  function bad(text) { problem = problem || text; }  // the first problem is named; the other fields are read
  location.hash.replace(/^#/, '').split('&').forEach(function (part) {
    if (!part) return;
    var eq = part.indexOf('='), k = eq < 0 ? part : part.slice(0, eq), v = eq < 0 ? '' : part.slice(eq + 1);
    if (HASH_FIELDS.indexOf(k) < 0) return bad('the address has an unknown field ' + strRepr(k) + ' (allowed: ' + HASH_FIELDS.join(', ') + ')');
    if (eq < 0) return bad('the address field ' + k + ' has no value (write ' + k + '=...)');
    if (seen[k]) return bad('the address gives the field ' + k + ' twice');
    seen[k] = true;
    try { vals[k] = decodeURIComponent(v); } catch (e) { bad('the address field ' + k + ' is not valid URL encoding'); }
  });
  $('spec').value = vals.spec;
  $('spec-b').value = vals['spec-b'];
  SIZE.concat(['grid', 'patch']).forEach(function (n) { $(n).value = vals[n]; });
  update({fromSpec: true});
  if (problem) $('status').textContent = problem + '; the other fields are shown. ' + $('status').textContent;
}
function init() {
  schemeOptions();
  $('spec').addEventListener('input', function () { update({fromSpec: true}); });
  $('spec-b').addEventListener('input', function () { update(); });
  $('bias-scale').addEventListener('change', function () { if (lastGood) update(); });
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
  $('cope-sentence').addEventListener('input', function () { if (lastGood) figCope(lastGood.cope); });
  $('cope-marks').addEventListener('change', function () { if (lastGood) figCope(lastGood.cope); });
  initSegments();  // positions from structure: the reader's text, whatever the scheme
  window.addEventListener('hashchange', function () { if (location.hash !== written) readHash(); });
  readHash();
}
// what the browser tests (and a console) can call: the same functions the page uses
globalThis.posencExplorer = {parseSpec: parseSpec, fullSpec: fullSpec, keyNumbers: keyNumbers, pyRepr: pyRepr,
                             copePositions: function (text, marks, nposMax) { return Array.from(copePositions(text, marks, nposMax)); },
                             // posenc.segment_positions(text.encode(), separators).tolist(), separators as text
                             segmentPositions: function (text, separators) { return segmentPositions(utf8(text), separators.map(function (l) { return l.map(utf8); })).positions; },
                             fmtF: fmtF, fmtE: fmtE, fmtG: fmtG, floatRepr: floatRepr, SpecError: SpecError,
                             gridValues: function (full, h, w, r, c) { return Array.from(gridValues(build(full), h, w, r, c)); },
                             // what a figure drew: {hidden, series: [{label, colour, dash, scheme, x, y}]} or its colour scales
                             drawn: function (id) { return JSON.parse(JSON.stringify(DRAWN[id] || null, function (k, v) { return ArrayBuffer.isView(v) ? Array.from(v) : v; })); },
                             // row i of head h's bias map over L positions, as the page computes it
                             biasRow: function (full, h, i, L) { var m = build(full), out = []; for (var j = 0; j < L; j++) out.push(m.bias(h, i, j)); return out; }};
if (typeof document !== 'undefined' && document.getElementById('controls')) init();
