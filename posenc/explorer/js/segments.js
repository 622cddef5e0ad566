// Positions from structure (posenc.segment_positions, posenc/positions.py; its token-by-token
// specification is posenc.reference.positions.segment_positions) of the reader's text, read as
// Python reads text.encode(): its UTF-8 bytes are the tokens. One column per level, outermost first,
// holds the index of the byte's segment at that level, counted inside its enclosing segment; the last
// column its offset inside the innermost segment. A byte ends a segment at level l when the bytes up
// to it end with one of level l's separators (overlapping occurrences too); the outermost level wins;
// the next byte starts the new segment (the separator is the last byte of the segment it ends).
var SEG_COLOURS = ['#cfe3f2', '#f6d7c3', '#c9eadf', '#f0d9e7', '#f8e7c0', '#d9eefa'];  // Okabe-Ito, light
var SEG_CHUNK = 32;  // bytes per row block of the grid (a block also ends after a newline)
function utf8(text) { return new TextEncoder().encode(text); }
// bytes: Uint8Array [L]; levels: [[Uint8Array, ...], ...] outermost first
// -> {positions: [[index per level..., offset]] (L rows), ends: [level the byte ends a segment at, or -1]}
function segmentPositions(bytes, levels) {
  var k = levels.length, idx = [], off = 0, ended = -1, positions = [], ends = [];
  for (var j = 0; j < k; j++) idx.push(0);
  for (var t = 0; t < bytes.length; t++) {
    if (t > 0 && ended >= 0) {  // the previous byte ended a segment at level `ended`
      idx[ended] += 1;
      for (j = ended + 1; j < k; j++) idx[j] = 0;
      off = 0;
    } else if (t > 0) off += 1;
    positions.push(idx.concat([off]));
    ended = -1;
    for (var l = 0; l < k && ended < 0; l++) {  // outermost first: the first level that ends here wins
      for (var s = 0; s < levels[l].length && ended < 0; s++) {
        var sep = levels[l][s], n = sep.length, match = n > 0 && n <= t + 1;
        for (var i = 0; match && i < n; i++) if (bytes[t - n + 1 + i] !== sep[i]) match = false;
        if (match) ended = l;
      }
    }
    ends.push(ended);
  }
  return {positions: positions, ends: ends};
}
// Python's repr of a byte string of ASCII bytes (b'\n\n', b'.'): the separators as posenc takes them
function bytesRepr(bytes) {
  var q = Array.prototype.indexOf.call(bytes, 39) >= 0 && Array.prototype.indexOf.call(bytes, 34) < 0 ? '"' : "'", out = 'b' + q;
  Array.prototype.forEach.call(bytes, function (b) {
    var ch = String.fromCharCode(b);
    if (b === 92 || ch === q) out += '\\' + ch;
    else if (b === 9) out += '\\t'; else if (b === 10) out += '\\n'; else if (b === 13) out += '\\r';
    else if (b < 32 || b >= 127) out += '\\x' + (b < 16 ? '0' : '') + b.toString(16);
    else out += ch;
  });
  return out + q;
}
function separatorsRepr(seps) {
  return '[' + seps.map(function (level) { return '[' + level.map(function (s) { return bytesRepr(utf8(s)); }).join(', ') + ']'; }).join(', ') + ']';
}
function segmentGlyph(ch) {  // how a character shows in its cell
  var names = {'\n': '↵', ' ': '␣', '\t': '⇥', '\r': '␍'}, c = ch.codePointAt(0);
  if (names[ch]) return names[ch];
  if (c < 32 || c === 127) return String.fromCodePoint(c === 127 ? 0x2421 : 0x2400 + c);  // ␀ .. ␟, ␡
  return ch;
}
function segmentPreset() { return SCHEMA.segments.presets[document.getElementById('segments-preset').value]; }
function figSegments() {
  var fig = document.getElementById('fig-segments'), box = document.getElementById('segments-text'), grid = document.getElementById('segments-grid');
  var text = box.value, preset = segmentPreset(), bytes = utf8(text), max = SCHEMA.segments.max_bytes;
  var msg = bytes.length > max ? 'at most ' + max + ' bytes (UTF-8), got ' + bytes.length : '';
  document.getElementById('segments-error').textContent = msg;
  box.setAttribute('aria-invalid', msg ? 'true' : 'false');
  document.getElementById('segments-command').textContent = 'posenc.segment_positions(text.encode(), ' + separatorsRepr(preset.separators) + ')';
  grid.textContent = '';
  if (msg) {
    ['positions', 'bytes', 'separators'].forEach(function (a) { fig.removeAttribute('data-' + a); });
    document.getElementById('segments-note').textContent = '';
    return;
  }
  var levels = preset.separators.map(function (level) { return level.map(utf8); }), k = levels.length;
  var r = segmentPositions(bytes, levels), P = r.positions;
  fig.dataset.positions = JSON.stringify(P);  // [L, levels + 1], as posenc.segment_positions(text.encode(), separators).tolist()
  fig.dataset.bytes = JSON.stringify(Array.from(bytes));
  fig.dataset.separators = JSON.stringify(preset.separators);
  // a running count of segments per level, for the colours (neighbouring segments never share one)
  var serial = [], count = [];
  for (var j = 0; j < k; j++) count.push(0);
  P.forEach(function (p, t) {
    var row = [];
    for (var j = 0; j < k; j++) {
      if (t > 0 && r.ends[t - 1] >= 0 && r.ends[t - 1] <= j) count[j] += 1;
      row.push(count[j]);
    }
    serial.push(row);
  });
  var chars = Array.from(text), wide = chars.some(function (c) { return c.codePointAt(0) > 127; });
  document.getElementById('segments-note').textContent = !bytes.length ? 'The text is empty: no positions ([0, ' + (k + 1) + ']).'
    : bytes.length + ' bytes' + (wide ? ' (' + chars.length + ' characters)' : '') + ': '
      + preset.levels.map(function (name, j) { var n = count[j] + 1; return n + ' ' + name + (n === 1 ? '' : 's'); }).join(', ') + '.';
  // blocks of at most SEG_CHUNK bytes, each ending after a newline or when full; a character never splits
  var blocks = [], cur = [], size = 0, t0 = 0;
  chars.forEach(function (c) {
    var n = utf8(c).length;
    if (size && size + n > SEG_CHUNK) { blocks.push(cur); cur = []; size = 0; }
    cur.push({ch: c, start: t0, n: n}); size += n; t0 += n;
    if (c === '\n') { blocks.push(cur); cur = []; size = 0; }
  });
  if (cur.length) blocks.push(cur);
  function cell(tag, text, cls, colour, title) {
    var el = document.createElement(tag);
    el.textContent = text;
    if (cls) el.className = cls;
    if (colour) el.style.background = colour;
    if (title) el.title = title;
    return el;
  }
  function head(tr, label) { var th = cell('th', label); th.scope = 'row'; tr.appendChild(th); }
  blocks.forEach(function (block) {
    var table = document.createElement('table'), first = block[0].start, last = block[block.length - 1].start + block[block.length - 1].n;
    table.className = 'seg-rows';
    table.setAttribute('aria-label', 'bytes ' + first + ' to ' + (last - 1));
    var tr = document.createElement('tr');
    tr.dataset.row = 'text';
    head(tr, 'text');
    block.forEach(function (c) {
      var t = c.start + c.n - 1, hex = Array.from(utf8(c.ch), function (b) { return (b < 16 ? '0' : '') + b.toString(16); }).join(' ');
      var th = cell('th', segmentGlyph(c.ch), r.ends[t] >= 0 ? 'end' : '', k ? SEG_COLOURS[serial[c.start][k - 1] % SEG_COLOURS.length] : '',
                    'byte ' + c.start + (c.n > 1 ? '..' + t : '') + ': U+' + c.ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + ', ' + hex);
      th.scope = 'col';
      if (c.n > 1) th.colSpan = c.n;
      tr.appendChild(th);
    });
    table.appendChild(tr);
    if (wide) {  // each byte of a multi-byte character has its own column and position
      tr = document.createElement('tr');
      tr.dataset.row = 'byte';
      head(tr, 'byte');
      for (var t = first; t < last; t++) tr.appendChild(cell('td', bytes[t] > 127 ? bytes[t].toString(16) : '', 'hex'));
      table.appendChild(tr);
    }
    for (var j = 0; j <= k; j++) {
      tr = document.createElement('tr');
      tr.dataset.column = String(j);
      head(tr, j < k ? preset.levels[j] : 'offset');
      for (t = first; t < last; t++) {
        var end = r.ends[t] >= 0 && (j === k || r.ends[t] <= j);
        tr.appendChild(cell('td', String(P[t][j]), end ? 'end' : '', j < k ? SEG_COLOURS[serial[t][j] % SEG_COLOURS.length] : ''));
      }
      table.appendChild(tr);
    }
    grid.appendChild(table);
  });
}
function initSegments() {
  var sel = document.getElementById('segments-preset'), box = document.getElementById('segments-text'), presets = SCHEMA.segments.presets;
  Object.keys(presets).forEach(function (name) { var o = document.createElement('option'); o.value = name; o.textContent = presets[name].label; sel.appendChild(o); });
  box.value = SCHEMA.segments.text;
  box.addEventListener('input', figSegments);
  sel.addEventListener('change', function () {  // an example not yet edited gives way to the new preset's
    var examples = Object.keys(presets).map(function (n) { return presets[n].example; });
    if (examples.indexOf(box.value) >= 0) box.value = segmentPreset().example;
    figSegments();
  });
  figSegments();
}
