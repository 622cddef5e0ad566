// Values as Python sees them (int vs float, dict order) and Python's number formatting
// (repr, .Nf, .Ne, .Ng), exact: doubles are decomposed and rounded half to even with BigInt.
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
