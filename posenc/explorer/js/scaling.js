// RoPE scalings: a port of posenc/scaling.py (pure functions of the float64 frequencies).
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
