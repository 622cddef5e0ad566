// posenc explorer: the deterministic schemes of posenc.reference in float64 JavaScript, live.
//
// Layout of this file (one job per section):
//   1. values as Python sees them (int vs float, dict order) and Python's number formatting
//   2. the SPEC parser, a strict port of posenc/spec.py
//   3. argument checks (posenc/_validate.py), torch's CPU random numbers (learned tables)
//   4. RoPE scalings (posenc/scaling.py)
//   5. SCHEMES: one function per scheme, spec -> model (add a scheme here: nothing else changes)
//   6. key numbers (posenc.analysis.key_numbers, printed as `posenc show` prints them)
//   7. drawing: palettes, heatmaps, line charts, colour bars
//   8. the figures and the "dog bites man" demonstration
//   9. controls, URL fragment state, errors
'use strict';
(function () {
  var SCHEMA = globalThis.POSENC_SCHEMA || JSON.parse(document.getElementById('schema').textContent);

  // ---- 1. Python values and formatting -------------------------------------------------------
  // Numbers carry their Python type: {t: 'int', v, s} or {t: 'float', v}; dicts are Maps (insertion
  // order); strings, booleans, null (None) and arrays are themselves.
  function pyInt(text) { var b = BigInt(text); return {t: 'int', v: Number(b), s: b.toString()}; }
  function pyFloat(x) { return {t: 'float', v: x}; }
  function isNum(v) { return v !== null && typeof v === 'object' && (v.t === 'int' || v.t === 'float'); }
  function isInt(v) { return v !== null && typeof v === 'object' && v.t === 'int'; }
  function isDict(v) { return v instanceof Map; }
  function fromSchema(v) {  // the typed JSON that posenc/explorer/__init__.py writes
    if (v === null || typeof v !== 'object') return v;
    if (Array.isArray(v)) return v.map(fromSchema);
    if ('$int' in v) return pyInt(v.$int);
    if ('$float' in v) return pyFloat(v.$float);
    if ('$required' in v) return REQUIRED;
    if ('$dict' in v) return new Map(v.$dict.map(function (kv) { return [kv[0], fromSchema(kv[1])]; }));
    throw new Error('bad schema value');
  }
  var REQUIRED = {required: true};

  function pad2(n) { var s = String(Math.abs(n)); return (n < 0 ? '-' : '+') + (s.length < 2 ? '0' + s : s); }
  // x = m * 2^e exactly (x finite, > 0)
  function decompose(x) {
    var dv = new DataView(new ArrayBuffer(8));
    dv.setFloat64(0, x);
    var hi = dv.getUint32(0), lo = dv.getUint32(4);
    var bexp = (hi >>> 20) & 0x7ff;
    var m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    if (bexp === 0) return {m: m, e: -1074};
    return {m: m | (1n << 52n), e: bexp - 1075};
  }
  // round(x * 10^f) half to even, exactly (x >= 0), as a BigInt; f may be negative
  function roundScaled(x, f) {
    if (x === 0) return 0n;
    var d = decompose(x), num = d.m, den = 1n;
    if (f >= 0) num *= 10n ** BigInt(f); else den *= 10n ** BigInt(-f);
    if (d.e >= 0) num <<= BigInt(d.e); else den <<= BigInt(-d.e);
    var q = num / den, r = num % den;
    if (2n * r > den || (2n * r === den && (q & 1n) === 1n)) q += 1n;
    return q;
  }
  function signOf(x) { return (x < 0 || (x === 0 && 1 / x < 0)) ? '-' : ''; }
  function special(x) { return isNaN(x) ? 'nan' : (x > 0 ? 'inf' : '-inf'); }
  function fmtF(x, f) {  // f"{x:.{f}f}"
    if (!isFinite(x)) return special(x);
    var s = roundScaled(Math.abs(x), f).toString();
    while (s.length < f + 1) s = '0' + s;
    return signOf(x) + (f > 0 ? s.slice(0, s.length - f) + '.' + s.slice(s.length - f) : s);
  }
  function sigDigits(x, p) {  // x > 0 rounded to p significant digits: {digits, exp}
    var X = Math.floor(Math.log10(x));
    for (var guard = 0; guard < 8; guard++) {
      var s = roundScaled(x, p - 1 - X).toString();
      if (s.length > p) X += 1; else if (s.length < p) X -= 1; else return {digits: s, exp: X};
    }
    throw new Error('formatting failed for ' + x);
  }
  function fmtE(x, prec) {  // f"{x:.{prec}e}"
    if (!isFinite(x)) return special(x);
    var sd = x === 0 ? {digits: '0'.repeat(prec + 1), exp: 0} : sigDigits(Math.abs(x), prec + 1);
    var d = sd.digits;
    return signOf(x) + d[0] + (prec > 0 ? '.' + d.slice(1) : '') + 'e' + pad2(sd.exp);
  }
  function fmtG(x, prec) {  // f"{x:.{prec}g}"
    if (!isFinite(x)) return special(x);
    var p = prec === 0 ? 1 : prec;
    if (x === 0) return signOf(x) + '0';
    var sd = sigDigits(Math.abs(x), p), X = sd.exp;
    if (X >= -4 && X < p) {
      var s = fmtF(x, p - 1 - X);
      if (s.indexOf('.') >= 0) s = s.replace(/0+$/, '').replace(/\.$/, '');
      return s;
    }
    var rest = sd.digits.slice(1).replace(/0+$/, '');
    return signOf(x) + sd.digits[0] + (rest ? '.' + rest : '') + 'e' + pad2(X);
  }
  function floatRepr(x) {  // repr(float): the shortest digits, Python's layout
    if (!isFinite(x)) return special(x);
    if (x === 0) return signOf(x) + '0.0';
    var m = /^(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(Math.abs(x).toExponential());
    var digits = m[1] + (m[2] || ''), X = parseInt(m[3], 10), body;
    if (X >= -4 && X < 16) {
      if (X >= 0) {
        while (digits.length < X + 1) digits += '0';
        body = digits.slice(0, X + 1) + '.' + (digits.slice(X + 1) || '0');
      } else {
        body = '0.' + '0'.repeat(-X - 1) + digits;
      }
    } else {
      body = digits[0] + (digits.length > 1 ? '.' + digits.slice(1) : '') + 'e' + pad2(X);
    }
    return signOf(x) + body;
  }
  function strRepr(s) {  // repr(str)
    var q = (s.indexOf("'") >= 0 && s.indexOf('"') < 0) ? '"' : "'";
    var out = '';
    for (var i = 0; i < s.length; i++) {
      var c = s[i], code = s.charCodeAt(i);
      if (c === '\\') out += '\\\\';
      else if (c === q) out += '\\' + q;
      else if (c === '\n') out += '\\n';
      else if (c === '\r') out += '\\r';
      else if (c === '\t') out += '\\t';
      else if (code < 0x20 || code === 0x7f) out += '\\x' + (code < 16 ? '0' : '') + code.toString(16);
      else out += c;
    }
    return q + out + q;
  }
  function pyRepr(v) {
    if (v === null) return 'None';
    if (v === true) return 'True';
    if (v === false) return 'False';
    if (typeof v === 'string') return strRepr(v);
    if (Array.isArray(v)) return '[' + v.map(pyRepr).join(', ') + ']';
    if (isDict(v)) {
      var parts = [];
      v.forEach(function (val, key) { parts.push(strRepr(key) + ': ' + pyRepr(val)); });
      return '{' + parts.join(', ') + '}';
    }
    if (v.t === 'int') return v.s;
    if (v.t === 'float') return floatRepr(v.v);
    throw new Error('cannot print value');
  }
  function pyStr(v) { return typeof v === 'string' ? v : pyRepr(v); }
  function pyType(v) {
    if (v === null) return 'NoneType';
    if (typeof v === 'boolean') return 'bool';
    if (typeof v === 'string') return 'str';
    if (Array.isArray(v)) return 'list';
    if (isDict(v)) return 'dict';
    return v.t;
  }

  // Correctly rounded pow and log. Python and NumPy call glibc's pow/log, which round correctly (all but
  // about 1 in 3000 pow calls, measured against mpmath); V8's Math.pow is often 1 ulp off (2^-0.5 is).
  // One ulp matters where a value lands on a printing tie: ALiBi's slopes are powers of 2^(1/k), and
  // 0.5·999 prints as 500 or 499 by the last bit. So the formulas of posenc.reference use these two,
  // computed in 160-bit fixed point with BigInt and rounded once, half to even.
  // 160 fraction bits: the series below add ~60 terms, each rounded at 2^-160, so the result is within
  // ~2^-150 of the truth, 2^97 times finer than a double's last bit; only a value that close to a
  // rounding tie could round wrongly (exact ties, from integer powers, are computed exactly).
  var PREC = 160n, ONE = 1n << PREC;
  function fxMul(a, b) { return (a * b) >> PREC; }
  function lnSeries(m) {  // m in [1, 2] (fixed point): ln m = 2 atanh(z), z = (m - 1)/(m + 1) <= 1/3
    var z = ((m - ONE) << PREC) / (m + ONE), z2 = fxMul(z, z), term = z, sum = 0n;
    for (var k = 1n; term !== 0n; k += 2n) { sum += term / k; term = fxMul(term, z2); }
    return 2n * sum;
  }
  var LN2 = lnSeries(2n * ONE);
  function fxLn(x) {  // x > 0 finite
    var d = decompose(x), bits = d.m.toString(2).length;
    return BigInt(d.e + bits - 1) * LN2 + lnSeries((d.m << PREC) >> BigInt(bits - 1));
  }
  function scale2(x, e) {  // x · 2^e for integer e, exactly while the result is a normal double
    var dv = new DataView(new ArrayBuffer(8));
    while (e !== 0) {
      var step = Math.max(-1000, Math.min(1000, e));
      dv.setUint32(0, (step + 1023) << 20); dv.setUint32(4, 0);
      x *= dv.getFloat64(0); e -= step;
    }
    return x;
  }
  function roundBig(num, den, e) {  // the double nearest num/den · 2^e (num, den > 0 BigInt)
    var shift = (num.toString(2).length - den.toString(2).length) - 55, n = num, dd = den;
    if (shift > 0) dd <<= BigInt(shift); else n <<= BigInt(-shift);
    var q = n / dd, r = n % dd;  // q has 55 or 56 bits
    var extra = q.toString(2).length - 53, low = q & ((1n << BigInt(extra)) - 1n), half = 1n << BigInt(extra - 1);
    q >>= BigInt(extra);
    if (low > half || (low === half && (r > 0n || (q & 1n) === 1n))) q += 1n;
    return scale2(Number(q), shift + extra + e);
  }
  function expFx(t) {  // the double nearest exp(t), t in fixed point
    var k = t >= 0n ? (t + LN2 / 2n) / LN2 : -((-t + LN2 / 2n) / LN2), r = t - k * LN2, sum = ONE, term = ONE;
    for (var n = 1n; term !== 0n; n++) { term = fxMul(term, r) / n; sum += term; }
    return roundBig(sum, 1n, Number(k) - Number(PREC));
  }
  function powCR(x, y) {
    if (y === 0 || x === 1) return 1;
    if (!(x > 0) || !isFinite(x) || !isFinite(y)) return Math.pow(x, y);
    var d = decompose(x);
    if (Number.isInteger(y) && Math.abs(y) <= 64) {  // exact rational, then one rounding
      var p = d.m ** BigInt(Math.abs(y));
      return y > 0 ? roundBig(p, 1n, d.e * y) : roundBig(1n, p, d.e * y);
    }
    var dy = decompose(Math.abs(y)), t = dy.m * fxLn(x);
    t = dy.e >= 0 ? t << BigInt(dy.e) : t >> BigInt(-dy.e);
    var v = expFx(y < 0 ? -t : t);
    return isFinite(v) && v !== 0 ? v : Math.pow(x, y);
  }
  function logCR(x) {
    if (!(x > 0) || !isFinite(x)) return Math.log(x);
    if (x === 1) return 0;
    var t = fxLn(x);
    return t > 0n ? roundBig(t, 1n, -Number(PREC)) : -roundBig(-t, 1n, -Number(PREC));
  }

  // ---- 2. SPEC parser (posenc/spec.py) -----------------------------------------------------
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
    if (!SCHEMES[name]) fail('the explorer draws the deterministic schemes (' + Object.keys(SCHEMES).join(', ') + '); ' + strRepr(name) + ' has learned or query-dependent terms: use `posenc show ' + name + '`');
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
      var v = out.get(k);
      if (isInt(v) && v.v > SCHEMA.size_bounds[k]) fail(k + ' must be at most ' + SCHEMA.size_bounds[k] + ' on the command line, got ' + v.s);
    });
    var unknown = [];
    out.forEach(function (v, k) { if (k !== 'scheme' && !sch.params.has(k)) unknown.push(k); });
    if (unknown.length) fail('unknown key ' + strRepr(unknown.sort()[0]) + ' for scheme ' + strRepr(sch.name) + '; allowed keys: ' + (Array.from(sch.params.keys()).join(', ') || '(none)'));
    var full = new Map([['scheme', sch.name]]);
    sch.params.forEach(function (d, k) { full.set(k, out.has(k) ? out.get(k) : d); });
    return full;
  }

  // ---- 3. argument checks (posenc/_validate.py) and torch's random numbers --------------------
  function bound(x) { return typeof x === 'number' ? floatRepr(x) : String(x); }
  function checkInt(name, v, min, max) {
    if (!isInt(v)) fail(name + ' must be an integer, got ' + pyRepr(v) + ' (' + pyType(v) + ')');
    if (min !== undefined && min !== null && v.v < min) fail(name + ' must be >= ' + min + ', got ' + v.s);
    if (max !== undefined && max !== null && v.v > max) fail(name + ' must be <= ' + max + ', got ' + v.s);
    return v.v;
  }
  function checkFloat(name, v, o) {
    o = o || {};
    if (!isNum(v)) fail(name + ' must be a number, got ' + pyRepr(v) + ' (' + pyType(v) + ')');
    var x = v.v;
    if (!isFinite(x)) fail(name + ' must be finite, got ' + floatRepr(x));
    if (o.min !== undefined) {
      if (o.minOpen && x <= o.min) fail(name + ' must be > ' + bound(o.min) + ', got ' + floatRepr(x));
      if (!o.minOpen && x < o.min) fail(name + ' must be >= ' + bound(o.min) + ', got ' + floatRepr(x));
    }
    if (o.max !== undefined && x > o.max) fail(name + ' must be <= ' + bound(o.max) + ', got ' + floatRepr(x));
    return x;
  }
  function checkBool(name, v) { if (typeof v !== 'boolean') fail(name + ' must be True or False, got ' + pyRepr(v) + ' (' + pyType(v) + ')'); return v; }
  function checkEven(name, n) { if (n % 2) fail(name + ' must be even (dimensions are rotated or paired two at a time), got ' + n); return n; }
  function checkChoice(name, v, allowed) { if (allowed.indexOf(v) < 0) fail(name + ' must be one of ' + allowed.map(strRepr).join(', ') + '; got ' + pyRepr(v)); return v; }
  function checkFloatList(name, v, length) {
    if (!Array.isArray(v)) fail(name + ' must be a list of numbers, got ' + pyRepr(v) + ' (' + pyType(v) + ')');
    var out = v.map(function (x, i) { return checkFloat(name + '[' + i + ']', x); });
    if (out.length !== length) fail(name + ' must have ' + length + ' entries, got ' + out.length);
    return out;
  }

  // torch.manual_seed(s) then torch.rand / torch.randn on the CPU: a 32-bit Mersenne Twister;
  // float32 uniforms take the low 24 bits of one draw; normals are Box-Muller, in float32 over
  // blocks of 16 uniforms when a tensor has >= 16 elements, else in float64 from 53-bit uniforms.
  function TorchCPU(seed) {
    var mt = new Uint32Array(624), idx = 624;
    mt[0] = seed >>> 0;
    for (var i = 1; i < 624; i++) mt[i] = (Math.imul(1812433253, mt[i - 1] ^ (mt[i - 1] >>> 30)) + i) >>> 0;
    function next() {
      if (idx >= 624) {
        for (var k = 0; k < 624; k++) {
          var y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7fffffff);
          mt[k] = mt[(k + 397) % 624] ^ (y >>> 1) ^ ((y & 1) ? 0x9908b0df : 0);
        }
        idx = 0;
      }
      var z = mt[idx++];
      z ^= z >>> 11; z ^= (z << 7) & 0x9d2c5680; z ^= (z << 15) & 0xefc60000; z ^= z >>> 18;
      return z >>> 0;
    }
    var f = Math.fround;
    function u24() { return (next() & 0xffffff) / 16777216; }
    function u53() { var hi = next(), lo = next(); return ((hi & 0x1fffff) * 4294967296 + lo) / 9007199254740992; }
    this.rand = function (n) { var out = new Float64Array(n); for (var k = 0; k < n; k++) out[k] = u24(); return out; };
    this.randn = function (n) {
      var out = new Float64Array(n), k;
      if (n < 16) {
        for (k = 0; k < n; k += 2) {
          var a = u53(), b = u53(), r = Math.sqrt(-2 * Math.log1p(-b)), th = 2 * Math.PI * a;
          out[k] = f(r * Math.cos(th));
          if (k + 1 < n) out[k + 1] = f(r * Math.sin(th));
        }
        return out;
      }
      for (k = 0; k < n; k++) out[k] = u24();
      function fill16(o) {
        for (var j = 0; j < 8; j++) {
          var u1 = f(1 - out[o + j]), u2 = out[o + j + 8];
          var radius = f(Math.sqrt(f(-2 * f(Math.log(u1))))), theta = f(2 * Math.PI * u2);
          out[o + j] = f(radius * f(Math.cos(theta)));
          out[o + j + 8] = f(radius * f(Math.sin(theta)));
        }
      }
      for (k = 0; k < n - 15; k += 16) fill16(k);
      if (n % 16) { for (k = 0; k < 16; k++) out[n - 16 + k] = u24(); fill16(n - 16); }
      return out;
    };
  }

  // ---- 4. RoPE scalings (posenc/scaling.py) -------------------------------------------------
  function range(n, fn) { var a = new Float64Array(n); for (var i = 0; i < n; i++) a[i] = fn(i); return a; }
  function ntkExponent(inv) { var d = 2 * inv.length; return range(inv.length, function (i) { return d <= 2 ? 0 : -(2 * i) / (d - 2); }); }
  function yarnMscale(scale, mscale) { return scale <= 1 ? 1 : 0.1 * mscale * logCR(scale) + 1; }
  function needFactor(p) { return checkFloat('factor', p.get('factor'), {min: 1}); }
  function needOriginal(p) { return checkInt('original_max_positions', p.get('original_max_positions'), 1); }
  var SCALINGS = {
    linear: function (inv, p) { var f = needFactor(p); return {inv: inv.map(function (t) { return t / f; }), af: 1}; },
    ntk: function (inv, p) {
      var f = needFactor(p), ex = ntkExponent(inv);
      return {inv: inv.map(function (t, i) { return t * powCR(f, ex[i]); }), af: 1};
    },
    yarn: function (inv, p, headDim, base) {
      var f = needFactor(p), orig = needOriginal(p);
      var bf = checkFloat('beta_fast', p.get('beta_fast'), {min: 0, minOpen: true});
      var bs = checkFloat('beta_slow', p.get('beta_slow'), {min: 0, minOpen: true});
      if (bf <= bs) fail('beta_fast must be > beta_slow (pairs rotating more than beta_fast times are extrapolated, fewer than beta_slow interpolated); got beta_fast=' + floatRepr(bf) + ', beta_slow=' + floatRepr(bs));
      var ms = checkFloat('mscale', p.get('mscale'), {min: 0});
      var msa = checkFloat('mscale_all_dim', p.get('mscale_all_dim'), {min: 0});
      var trunc = checkBool('truncate', p.get('truncate'));
      var af = p.get('attention_factor');
      af = af === null ? yarnMscale(f, ms) / yarnMscale(f, msa) : checkFloat('attention_factor', af, {min: 0, minOpen: true});
      if (base <= 1) fail('base must be > 1 for yarn (its correction range divides by ln base), got ' + floatRepr(base));
      var d = 2 * inv.length;
      function dimOf(rot) { return d * logCR(orig / (rot * 2 * Math.PI)) / (2 * logCR(base)); }
      var low = dimOf(bf), high = dimOf(bs);
      if (trunc) { low = Math.floor(low); high = Math.ceil(high); }
      low = Math.max(low, 0); high = Math.min(high, d - 1);
      if (low === high) high += 0.001;
      return {inv: inv.map(function (t, i) {
        var ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
        return t / f * ramp + t * (1 - ramp);
      }), af: af};
    },
    llama3: function (inv, p) {
      var f = needFactor(p), orig = needOriginal(p);
      var lo = checkFloat('low_freq_factor', p.get('low_freq_factor'), {min: 0, minOpen: true});
      var hi = checkFloat('high_freq_factor', p.get('high_freq_factor'), {min: 0, minOpen: true});
      if (hi <= lo) fail('high_freq_factor must be > low_freq_factor; got high_freq_factor=' + floatRepr(hi) + ', low_freq_factor=' + floatRepr(lo));
      return {inv: inv.map(function (t) {
        var wl = 2 * Math.PI / t, smooth = (orig / wl - lo) / (hi - lo);
        var out = wl > orig / lo ? t / f : t;
        if (wl >= orig / hi && wl <= orig / lo) out = (1 - smooth) * out / f + smooth * out;
        return out;
      }), af: 1};
    },
    dynamic: function (inv, p) {
      var f = needFactor(p), orig = needOriginal(p), ex = ntkExponent(inv);
      return {inv: inv, af: 1, byLength: {switch: orig, short: inv, long: inv, slope: f / orig, intercept: 1 - f, exponent: ex}};
    },
    longrope: function (inv, p) {
      var n = inv.length;
      var sf = checkFloatList('short_factor', p.get('short_factor'), n), lf = checkFloatList('long_factor', p.get('long_factor'), n);
      [['short_factor', sf], ['long_factor', lf]].forEach(function (nv) {
        var mi = Math.min.apply(null, nv[1]);
        if (mi <= 0) fail(nv[0] + ' entries must be > 0, got ' + floatRepr(mi) + ' at index ' + nv[1].indexOf(mi));
      });
      var f = needFactor(p), orig = needOriginal(p), af = p.get('attention_factor');
      af = af === null ? (f <= 1 ? 1 : Math.sqrt(1 + logCR(f) / logCR(orig))) : checkFloat('attention_factor', af, {min: 0, minOpen: true});
      var short = inv.map(function (t, i) { return t / sf[i]; }), long = inv.map(function (t, i) { return t / lf[i]; });
      return {inv: short, af: af, byLength: {switch: orig, short: short, long: long, slope: 0, intercept: 1, exponent: null}};
    },
    xpos: function (inv, p) {
      var sb = checkFloat('scale_base', p.get('scale_base'), {min: 0, minOpen: true});
      var g = checkFloat('gamma', p.get('gamma'), {min: 0, minOpen: true}), d = 2 * inv.length;
      return {inv: inv, af: 1, decay: range(inv.length, function (i) { return logCR(((2 * i) / d + g) / (1 + g)) / sb; })};
    }
  };
  function resolveScaling(sc, inv, headDim, base) {  // scaling.resolve
    var out = {inv: inv, af: 1, byLength: null, decay: null, type: null};
    if (sc === null) return out;
    if (!isDict(sc)) fail("scaling must be a dict like {'type': 'linear', 'factor': 4}, got " + pyRepr(sc));
    var type = sc.get('type');
    if (typeof type !== 'string' || !SCALINGS[type] || !SCALING_PARAMS[type]) fail('scaling type must be one of ' + Object.keys(SCHEMA.scalings).map(strRepr).join(', ') + '; got ' + pyRepr(type === undefined ? null : type));
    var allowed = SCALING_PARAMS[type], params = new Map();
    var unknown = [];
    sc.forEach(function (v, k) { if (k !== 'type') { if (!allowed.has(k)) unknown.push(k); params.set(k, v); } });
    if (unknown.length) fail('unknown key ' + strRepr(unknown.sort()[0]) + " for scaling '" + type + "'; allowed keys: type, " + Array.from(allowed.keys()).join(', '));
    var missing = [];
    allowed.forEach(function (d, k) { if (d === REQUIRED && !params.has(k)) missing.push(k); else if (!params.has(k)) params.set(k, d); });
    if (missing.length) fail("scaling '" + type + "' needs " + missing.map(strRepr).join(', ') + "; e.g. {'type': '" + type + "', " + strRepr(missing[0]) + ': ...}');
    var r;
    try { r = SCALINGS[type](inv, params, headDim, base); } catch (e) {
      if (e instanceof SpecError) fail("scaling '" + type + "': " + e.message);
      throw e;
    }
    return {inv: r.inv, af: r.af, byLength: r.byLength || null, decay: r.decay || null, type: type, params: params};
  }
  function freqAt(sc, L) {  // Scaled.at(L): the frequencies of a sequence of L positions
    var b = sc.byLength;
    if (!b || L <= b.switch) return sc.inv;
    if (b.exponent === null) return b.long;
    var s = Math.max(1, L * b.slope + b.intercept);
    return b.long.map(function (t, i) { return t * Math.pow(s, b.exponent[i]); });
  }
  function pyRound(x) {  // round() of Python 3: half to even
    var r = Math.round(x);
    if (Math.abs(x % 1) === 0.5 && r % 2 !== 0) r -= 1;
    return r;
  }

  // ---- 5. SCHEMES: spec (a full Map) -> model -------------------------------------------------
  // A new scheme is one function here (plus its name in PAGE_SCHEMES, posenc/explorer/__init__.py):
  // it validates the spec as the module's __init__ does and returns a model of one of the kinds
  // below; the key numbers and figures dispatch on the kind. A new kind (e.g. multi-axis, grid
  // positions) adds its own figure function in section 8 and its rows in keyNumbers.
  // A model has: kind ('none' | 'additive' | 'rotary' | 'bias'), and by kind
  //   additive, rotary: width, row(p) -> Float64Array (the table's row at position p, [L, width]),
  //                     invFreq (θ the scheme registers), and an isometry: row(p) = R(p)·row(0);
  //   rotary:           headDim, rotaryDim, freqAt(L), attentionFactor, decay (xPos) or null,
  //                     spectrum() -> {before, after, context, extended};
  //   bias:             numHeads, bias(h, i, j) (query i, key j), buckets (T5) optional.
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
  var SCHEMES = {
    nope: function () { return {kind: 'none'}; },
    sinusoidal: function (s) {  // Vaswani et al. 2017: PE(p, 2i) = sin(p θ_i), PE(p, 2i+1) = cos(p θ_i)
      var d = checkEven('d_model', checkInt('d_model', s.get('d_model'), 2));
      var base = checkFloat('base', s.get('base'), {min: 0, minOpen: true});
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
      var rd = s.get('rotary_dim') === null ? D : checkInt('rotary_dim', s.get('rotary_dim'), 2);
      if (rd > D) fail('rotary_dim must be <= head_dim=' + D + ', got ' + rd);
      checkEven('rotary_dim', rd);
      checkChoice('layout', s.get('layout'), ['half', 'interleaved']);
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
    }
  };

  // ---- 6. key numbers (posenc.analysis.key_numbers) -----------------------------------------
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
  function keyNumbers(full, L, m) {  // m: the model of full, when the caller has built it
    m = m || build(full);
    var out = [];
    var specText = [];
    full.forEach(function (v, k) { if (k !== 'scheme') specText.push(k + '=' + pyStr(v)); });
    out.push(['scheme', full.get('scheme')], ['kind', m.kind], ['spec', specText.join(', ') || '(no parameters)']);
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
    if (m.kind === 'bias') {
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
    return out;
  }

  // ---- 7. drawing -----------------------------------------------------------------------------
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
  function canvasOf(id) {
    var c = document.querySelector('#' + id + ' canvas'), ctx = c.getContext('2d');
    document.getElementById(id).hidden = false;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, c.width, c.height);
    ctx.font = '12px system-ui, sans-serif'; ctx.fillStyle = '#222'; ctx.strokeStyle = '#222';
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
    if (id !== 'fig-order') { document.getElementById(id).hidden = true; notShown.push(FIGURE_NAMES[id]); }
    g.ctx.fillStyle = '#f3f3f3'; g.ctx.fillRect(0, 0, g.W, g.H); g.ctx.fillStyle = '#555';
    g.ctx.textAlign = 'center'; g.ctx.fillText(text, g.W / 2, g.H / 2);
    g.c.setAttribute('aria-label', text);
  }
  // series: [{x: [], y: [], label, dash}]; opts: {title, xlabel, ylabel, logY, vlines: [{x, label}]}
  function lineChart(id, series, opts) {
    var g = canvasOf(id), ctx = g.ctx, L = 62, R = 12, T = 26, B = 40, w = g.W - L - R, h = g.H - T - B;
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
    ctx.fillText(opts.xlabel, L + w / 2, g.H - 6);
    ctx.save(); ctx.translate(13, T + h / 2); ctx.rotate(-Math.PI / 2); ctx.fillText(opts.ylabel, 0, 0); ctx.restore();
    (opts.vlines || []).forEach(function (v) {
      ctx.save(); ctx.setLineDash([4, 4]); ctx.strokeStyle = '#777'; ctx.beginPath(); ctx.moveTo(X(v.x), T); ctx.lineTo(X(v.x), T + h); ctx.stroke(); ctx.restore();
      ctx.fillStyle = '#555'; ctx.textAlign = 'left'; ctx.fillText(v.label, Math.min(X(v.x) + 3, L + w - 60), T + 12 + 13 * (v.row || 0));
    });
    ctx.save(); ctx.beginPath(); ctx.rect(L, T, w, h); ctx.clip();
    series.forEach(function (s, k) {
      ctx.strokeStyle = LINES[k % LINES.length]; ctx.fillStyle = ctx.strokeStyle; ctx.lineWidth = 1.6; ctx.setLineDash(s.dash || []);
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
    var ly = T + 14;
    series.forEach(function (s, k) {
      var tw = ctx.measureText(s.label).width, lx = opts.legendLeft ? L + 8 : L + w - tw - 34;
      ctx.fillStyle = 'rgba(255,255,255,0.85)'; ctx.fillRect(lx - 4, ly - 10, tw + 36, 14);
      ctx.strokeStyle = LINES[k % LINES.length]; ctx.lineWidth = 2; ctx.setLineDash(s.dash || []);
      ctx.beginPath(); ctx.moveTo(lx, ly - 4); ctx.lineTo(lx + 24, ly - 4); ctx.stroke(); ctx.setLineDash([]);
      ctx.fillStyle = '#222'; ctx.fillText(s.label, lx + 28, ly); ly += 15;
    });
    g.c.setAttribute('aria-label', opts.title + ': ' + series.map(function (s) { return s.label; }).join('; '));
  }
  function colourBar(ctx, x, y, h, lo, hi, stops, label) {
    for (var k = 0; k < h; k++) { var c = palette(stops, 1 - k / (h - 1)); ctx.fillStyle = 'rgb(' + c.map(Math.round).join(',') + ')'; ctx.fillRect(x, y + k, 12, 1); }
    ctx.strokeStyle = '#222'; ctx.strokeRect(x, y, 12, h); ctx.fillStyle = '#222'; ctx.textAlign = 'left';
    ticks(lo, hi, 4).forEach(function (v) { var py = y + h - (v - lo) / ((hi - lo) || 1) * h; ctx.fillText(nice(v), x + 15, py + 4); });
    ctx.save(); ctx.translate(x + 62, y + h / 2); ctx.rotate(Math.PI / 2); ctx.textAlign = 'center'; ctx.fillText(label, 0, 0); ctx.restore();
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

  // ---- 8. figures -------------------------------------------------------------------------------
  var NAMES = {nope: 'NoPE', sinusoidal: 'sinusoidal', rope: 'RoPE', alibi: 'ALiBi', kerple: 'KERPLE', t5: 'T5'};
  var FIGURE_NAMES = {'fig-table': 'the table', 'fig-similarity': 'similarity vs distance', 'fig-qk': 'q·k vs distance',
                      'fig-wavelengths': 'wavelengths', 'fig-bias': 'bias maps'};
  function figTable(m, full, L) {
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
    if (m.kind !== 'additive' && m.kind !== 'rotary') return notApplicable('fig-similarity', 'no vectors to compare: ' + NAMES[full.get('scheme')] + ' is a ' + m.kind + ' scheme');
    var sim = analyse(m, L).sim;
    lineChart('fig-similarity', [{x: seq(L), y: sim, label: 'cos(PE(p), PE(p + r))'}],
      {title: 'cosine similarity vs distance', xlabel: 'distance r', ylabel: 'cosine similarity'});
  }
  function figQK(m, full, L) {
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
        var sc = ks.map(function (kk, j) { return dot(qs[i], kk) / Math.sqrt(hd) + (m.kind === 'bias' ? m.bias(h, i, j) : 0); });
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
      : 'Every shared word has the same output in both, although this scheme encodes position: its term depends only on '
        + 'the distance |i − j|' + (a.slice().reverse().join(' ') === b.join(' ') ? ', and B is A reversed' : '')
        + '. Put a word in front of both sentences (a start token, as real models do) and the outputs differ; only NoPE '
        + 'stays blind to every order.';
    g.c.setAttribute('aria-label', 'distance per shared word: ' + common.map(function (w, i) { return w + ' ' + fmtG(d[i], 3); }).join(', '));
  }

  // ---- 9. controls, state, URL ------------------------------------------------------------------
  var $ = function (id) { return document.getElementById(id); };
  var SIZE = ['length', 'dim', 'heads'];
  var state = {spec: null, full: null, sizes: null};
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
      if (key === 'layout' || key === 'variant') {
        input = document.createElement('select');
        (key === 'layout' ? ['half', 'interleaved'] : ['log', 'power']).forEach(function (o) { var op = document.createElement('option'); op.value = o; op.textContent = o; input.appendChild(op); });
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
    var sizes = {}, bad = false, given = null, full = null, specMessage = '';
    SIZE.forEach(function (n) {
      try { sizes[n] = readSize(n); setError(n, ''); $(n + '-slider').value = Math.min(sizes[n], Number($(n + '-slider').max)); }
      catch (e) { if (!(e instanceof SpecError)) throw e; setError(n, e.message); bad = true; }
    });
    try {
      given = parseSpec($('spec').value);
      if (!bad) { full = fullSpec(given, sizes); build(full); }
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
    if (bad) {
      $('status').textContent = lastGood ? 'Fix the value marked in red; the figures and numbers show the last valid view.' : 'Fix the value marked in red.';
      document.documentElement.setAttribute('data-valid', '0');
      return;
    }
    state.full = full; state.sizes = sizes;
    var token = ++pending, width = build(full).width || 0;
    if (width * sizes.length <= BIG) {
      $('status').textContent = '';
      render(full, sizes);
      writeHash();
      return;
    }
    // a large table (up to the command line's 16384 × 4096) takes seconds: say so, then compute
    $('status').textContent = 'Computing ' + sizes.length + ' positions × ' + width + ' dimensions…';
    setTimeout(function () {
      if (token !== pending) return;  // a newer change supersedes this one
      render(full, sizes);
      $('status').textContent = '';
      writeHash();
    }, 30);
  }
  var pending = 0, BIG = 1 << 21;  // about 0.1 s of cos/sin in V8 (measured: 16384 × 4096 takes ~9 s)
  function render(full, sizes) {
    var L = sizes.length, m = build(full);
    var numbers = keyNumbers(full, L, m), body = document.querySelector('#key-numbers tbody');
    body.textContent = '';
    numbers.forEach(function (kv) { var tr = document.createElement('tr'); kv.forEach(function (c) { var td = document.createElement('td'); td.textContent = c; tr.appendChild(td); }); body.appendChild(tr); });
    $('show-command').textContent = 'posenc show ' + shellQuote(pyStrip($('spec').value)) + ' --length ' + L + ' --dim ' + sizes.dim + ' --heads ' + sizes.heads;
    var figs = [['fig-table', figTable], ['fig-similarity', figSimilarity], ['fig-qk', figQK], ['fig-wavelengths', figWavelengths], ['fig-bias', figBias]];
    notShown = [];
    figs.forEach(function (f) { f[1](m, full, L); });
    $('not-shown').textContent = notShown.length ? 'Not drawn for ' + NAMES[full.get('scheme')] + ' (' + m.kind + '): ' + notShown.join(', ') + '.' : '';
    figOrder(full);
    lastGood = {full: full, sizes: sizes};
    renders += 1;
    document.documentElement.setAttribute('data-renders', String(renders));
    document.documentElement.setAttribute('data-valid', '1');
  }
  function shellQuote(s) { return /^[A-Za-z0-9_:=,.\-+]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }
  var written = null;
  function writeHash() {
    var h = '#spec=' + encodeURIComponent(pyStrip($('spec').value)) + SIZE.map(function (n) { return '&' + n + '=' + encodeURIComponent(pyStrip($(n).value)); }).join('');
    if (location.hash === h) return;
    written = h;
    try { history.replaceState(null, '', h); } catch (e) { location.hash = h; }
  }
  function readHash() {
    var vals = {spec: SCHEMA.defaults.spec, length: String(SCHEMA.defaults.length), dim: String(SCHEMA.defaults.dim), heads: String(SCHEMA.defaults.heads)}, problem = '';
    location.hash.replace(/^#/, '').split('&').forEach(function (part) {
      if (!part) return;
      var eq = part.indexOf('='), k = eq < 0 ? part : part.slice(0, eq), v = eq < 0 ? '' : part.slice(eq + 1);
      if (!(k in vals)) { problem = 'the address has an unknown field ' + strRepr(k) + ' (allowed: spec, length, dim, heads)'; return; }
      try { vals[k] = decodeURIComponent(v); } catch (e) { problem = 'the address field ' + k + ' is not valid URL encoding'; }
    });
    $('spec').value = vals.spec;
    SIZE.forEach(function (n) { $(n).value = vals[n]; });
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
    ['sentence-a', 'sentence-b'].forEach(function (id) { $(id).addEventListener('input', function () { if (lastGood) figOrder(lastGood.full); }); });
    window.addEventListener('hashchange', function () { if (location.hash !== written) readHash(); });
    readHash();
  }
  // what the browser tests (and a console) can call: the same functions the page uses
  globalThis.posencExplorer = {parseSpec: parseSpec, fullSpec: fullSpec, keyNumbers: keyNumbers, pyRepr: pyRepr,
                               fmtF: fmtF, fmtE: fmtE, fmtG: fmtG, floatRepr: floatRepr, SpecError: SpecError};
  if (typeof document !== 'undefined' && document.getElementById('controls')) init();
})();
