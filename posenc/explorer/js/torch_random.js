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
