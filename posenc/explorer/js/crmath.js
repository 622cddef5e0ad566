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
