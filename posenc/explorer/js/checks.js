// Argument checks with posenc/_validate.py's messages.
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
