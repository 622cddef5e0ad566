// The SPEC parser: a strict port of posenc/spec.py (parse_value, _split_items, parse_spec,
// _route_scaling), fill_sizes, the command line's size bounds and registry.normalize_spec.
function SpecError(message, control) { this.message = message; this.control = control || 'spec'; }
function fail(message) { throw new SpecError(message); }
var RE_INT = /^[+-]?\d+$/;
var RE_FLOAT = /^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$/;
var RE_WORD = /^[A-Za-z_][A-Za-z0-9_.\-]*$/;
var RE_NAME = /^[A-Za-z_][A-Za-z0-9_\-]*$/;
var RE_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
var ALLOWED_VALUES = 'an integer, a number, true/false, none, a JSON list/object, a quoted string or a word';
function pyStrip(s) { return s.replace(/^[\s\u001c-\u001f\u0085]+|[\s\u001c-\u001f\u0085]+$/g, ''); }

// JSON as Python's json.loads reads it: ints stay ints, objects keep their order, no NaN/Infinity
function parseJSON(text, where) {
  var i = 0;
  function err(msg) { throw new SpecError(where + ' (' + msg + ' at character ' + i + ')'); }
  function ws() { while (i < text.length && ' \t\n\r'.indexOf(text[i]) >= 0) i++; }
  function value() {
    ws();
    var c = text[i];
    if (c === '{') {
      i++; var m = new Map(); ws();
      if (text[i] === '}') { i++; return m; }
      for (;;) {
        ws(); if (text[i] !== '"') err('Expecting property name enclosed in double quotes');
        var k = string(); ws();
        if (text[i] !== ':') err("Expecting ':' delimiter");
        i++; m.set(k, value()); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return m; }
        err("Expecting ',' delimiter");
      }
    }
    if (c === '[') {
      i++; var a = []; ws();
      if (text[i] === ']') { i++; return a; }
      for (;;) {
        a.push(value()); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return a; }
        err("Expecting ',' delimiter");
      }
    }
    if (c === '"') return string();
    if (text.startsWith('true', i)) { i += 4; return true; }
    if (text.startsWith('false', i)) { i += 5; return false; }
    if (text.startsWith('null', i)) { i += 4; return null; }
    if (text.startsWith('NaN', i) || text.startsWith('Infinity', i) || text.startsWith('-Infinity', i)) {
      throw new SpecError('NaN and Infinity are not allowed in a SPEC value (numbers must be finite)');
    }
    var m2 = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m2) err('Expecting value');
    i += m2[0].length;
    if (!m2[2] && !m2[3]) return pyInt(m2[0]);
    var x = Number(m2[0]);
    if (!isFinite(x)) throw new SpecError('a number in ' + where + ' is not finite');
    return pyFloat(x);
  }
  function string() {
    i++; var out = '';
    for (;;) {
      if (i >= text.length) err('Unterminated string starting');
      var c = text[i++];
      if (c === '"') return out;
      if (c === '\\') {
        var e = text[i++];
        var map = {'"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t'};
        if (e in map) out += map[e];
        else if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.substr(i, 4))) { out += String.fromCharCode(parseInt(text.substr(i, 4), 16)); i += 4; }
        else err('Invalid \\escape');
      } else if (c.charCodeAt(0) < 0x20) err('Invalid control character');
      else out += c;
    }
  }
  var v = value(); ws();
  if (i < text.length) err('Extra data');
  return v;
}

function parseValue(text, key) {
  var s = pyStrip(text), low = s.toLowerCase();
  if (low === 'true' || low === 'false') return low === 'true';
  if (low === 'none' || low === 'null') return null;
  var bare = low.replace(/^[+-]+/, '');
  if (bare === 'nan' || bare === 'inf' || bare === 'infinity') fail(key + '=' + s + ' is not a finite number');
  if (RE_INT.test(s)) return pyInt(s.replace(/^\+/, ''));
  if (RE_FLOAT.test(s)) {
    var x = Number(s);
    if (!isFinite(x)) fail(key + '=' + s + ' is not a finite number');
    return pyFloat(x);
  }
  if (s[0] === '[' || s[0] === '{' || s[0] === '"') return parseJSON(s, key + '=' + s + ' is not valid JSON');
  if (RE_WORD.test(s)) return s;
  fail('cannot read ' + key + '=' + strRepr(s) + '; a value is ' + ALLOWED_VALUES);
}
function splitItems(text) {
  var items = [], depth = 0, quoted = false, start = 0;
  for (var i = 0; i < text.length; i++) {
    var ch = text[i];
    if (quoted) { if (ch === '"' && text[i - 1] !== '\\') quoted = false; }
    else if (ch === '"') quoted = true;
    else if (ch === '[' || ch === '{') depth += 1;
    else if (ch === ']' || ch === '}') {
      depth -= 1;
      if (depth < 0) fail('unbalanced ' + strRepr(ch) + ' in SPEC parameters ' + strRepr(text));
    } else if (ch === ',' && depth === 0) { items.push(text.slice(start, i)); start = i + 1; }
  }
  if (depth || quoted) fail('unclosed ' + (quoted ? 'quote' : 'bracket') + ' in SPEC parameters ' + strRepr(text));
  items.push(text.slice(start));
  return items;
}
function scheme(name) {  // registry.get
  if (typeof name !== 'string') fail('scheme must be a string, got ' + pyRepr(name) + ' (' + pyType(name) + ')');
  if (SCHEMA.all_schemes.indexOf(name) < 0) fail('unknown scheme ' + strRepr(name) + '; known schemes: ' + SCHEMA.all_schemes.join(', '));
  if (!SCHEMES[name]) fail('the explorer draws ' + Object.keys(SCHEMES).join(', ') + '; ' + strRepr(name) + ' has learned or query-dependent terms: use `posenc show ' + name + '`');
  return {name: name, kind: SCHEMA.schemes[name].kind, params: PARAMS[name]};
}
var PARAMS = {};  // scheme -> Map(param -> default or REQUIRED)
Object.keys(SCHEMA.schemes).forEach(function (n) {
  PARAMS[n] = new Map(SCHEMA.schemes[n].params.map(function (kv) { return [kv[0], fromSchema(kv[1])]; }));
});
var SCALING_PARAMS = {};
Object.keys(SCHEMA.scalings).forEach(function (n) {
  SCALING_PARAMS[n] = new Map(SCHEMA.scalings[n].map(function (kv) { return [kv[0], fromSchema(kv[1])]; }));
});

function parseSpec(text) {  // -> Map {scheme: name, ...given}
  text = pyStrip(text);
  if (!text) fail('SPEC is empty; known schemes: ' + SCHEMA.all_schemes.join(', '));
  if (text[0] === '{') {
    var data = parseJSON(text, 'inline JSON SPEC is not valid JSON');
    if (!isDict(data) || !data.has('scheme')) fail('inline JSON SPEC must hold a JSON object with a \'scheme\' key, e.g. {"scheme": "rope", "head_dim": 64}');
    scheme(data.get('scheme'));
    return data;
  }
  if (/\.json$/i.test(text)) fail('the explorer cannot read files; paste the JSON object itself, or use name:key=value,...');
  var at = text.indexOf(':');
  var name = pyStrip(at < 0 ? text : text.slice(0, at)), rest = at < 0 ? '' : text.slice(at + 1);
  if (!RE_NAME.test(name)) fail('SPEC must start with a scheme name, got ' + strRepr(name) + '; known schemes: ' + SCHEMA.all_schemes.join(', '));
  var sch = scheme(name), given = new Map();
  if (at >= 0 && !pyStrip(rest)) fail('SPEC ' + strRepr(text) + " has ':' but no key=value after it");
  if (pyStrip(rest)) {
    splitItems(rest).forEach(function (item) {
      var eq = item.indexOf('='), key = pyStrip(eq < 0 ? item : item.slice(0, eq));
      if (eq < 0 || !RE_KEY.test(key)) fail('expected key=value in SPEC ' + strRepr(text) + ', got ' + strRepr(pyStrip(item)));
      if (given.has(key)) fail('key ' + strRepr(key) + ' is given twice in SPEC ' + strRepr(text));
      given.set(key, parseValue(item.slice(eq + 1), key));
    });
  }
  var out = new Map([['scheme', sch.name]]);
  routeScaling(sch, given).forEach(function (v, k) { out.set(k, v); });
  return out;
}
function routeScaling(sch, given) {
  var extra = [];
  given.forEach(function (v, k) { if (!sch.params.has(k)) extra.push(k); });
  if (typeof given.get('scaling') === 'string' && sch.params.has('scaling')) {
    var g2 = new Map(given); g2.set('scaling', new Map([['type', given.get('scaling')]])); given = g2;
  }
  if (!extra.length) return given;
  var allowed = Array.from(sch.params.keys()).join(', ') || '(none)';
  if (!sch.params.has('scaling') || !given.has('scaling')) fail('unknown key ' + strRepr(extra.slice().sort()[0]) + ' for scheme ' + strRepr(sch.name) + '; allowed keys: ' + allowed);
  var sc = given.get('scaling');
  if (!isDict(sc)) fail('scaling must be a scaling type (e.g. scaling=linear,factor=4) when other keys (' + extra.slice().sort().join(', ') + ') are given; got scaling=' + pyRepr(sc));
  sc = new Map(sc);
  extra.forEach(function (k) { sc.set(k, given.get(k)); });
  var out = new Map();
  given.forEach(function (v, k) { if (sch.params.has(k)) out.set(k, v); });
  out.set('scaling', sc);
  return out;
}
// fill_sizes + the command line's size bounds + registry.normalize_spec
function fullSpec(given, sizes) {
  var sch = scheme(given.get('scheme')), out = new Map(given);
  var fill = {d_model: sizes.dim, head_dim: sizes.dim, num_heads: sizes.heads, max_positions: sizes.length};
  sch.params.forEach(function (d, k) { if (d === REQUIRED && !out.has(k) && fill[k] !== undefined) out.set(k, pyInt(String(fill[k]))); });
  Object.keys(SCHEMA.size_bounds).forEach(function (k) {
    var v = out.get(k), list = Array.isArray(v);  // posenc.limits.Limit.check: a list, every entry
    (list ? v : [v]).forEach(function (x, i) {
      if (isNum(x) && x.v > SCHEMA.size_bounds[k]) fail((list ? k + '[' + i + ']' : k) + ' must be at most ' + SCHEMA.size_bounds[k] + ' on the command line (' + SCHEMA.size_what[k] + '), got ' + (isInt(x) ? x.s : fmtG(x.v, 6)));
    });
  });
  checkWork(sch, out, sizes);
  var unknown = [];
  out.forEach(function (v, k) { if (k !== 'scheme' && !sch.params.has(k)) unknown.push(k); });
  if (unknown.length) fail('unknown key ' + strRepr(unknown.sort()[0]) + ' for scheme ' + strRepr(sch.name) + '; allowed keys: ' + (Array.from(sch.params.keys()).join(', ') || '(none)'));
  var full = new Map([['scheme', sch.name]]);
  sch.params.forEach(function (d, k) { full.set(k, out.has(k) ? out.get(k) : d); });
  return full;
}

// the command line's bounds on the work of `posenc show` (posenc.limits: cells, pairs, the linear fit)
function checkWork(sch, out, sizes) {
  if (sch.kind !== 'additive' && sch.kind !== 'rotary') return;
  var w = out.get('d_model') || out.get('head_dim'), width = isInt(w) ? w.v : sizes.dim, n = sizes.length;
  var b = SCHEMA.work_bounds, what = '--length ' + n + ' × width ' + width;
  if (n * width > b.cells) fail(what + ' makes a table over the command line\'s limit of ' + b.cells + ' cells');
  if (n * n * width > b.pairs) fail(what + ' makes a fingerprint comparison over the command line\'s limit');
  if (sch.kind === 'additive' && n * width * width > b.fit) fail(what + ' makes a linear-map fit over the command line\'s limit');
}
