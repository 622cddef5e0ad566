// CoPE's contextual positions of a typed sentence (CoPE.sentence_positions, posenc/encodings/cope.py):
// the last character (the query) gives character j the position p_j = min(Σ_{t=j..i} g_t, npos_max − 1),
// the gates g_t = σ(±40) firing exactly on the chosen marks: CoPE counting words or sentences, not tokens.
// σ(40) is 1 in float64; σ(−40) is not 0, and its digits are torch's (and 1/(1 + e⁴⁰) correctly rounded,
// which V8's Math.exp misses by an ulp), so it is written here; the sum runs as torch's cumsum runs,
// from the query backwards, one gate at a time.
var GATE_ON = 1, GATE_OFF = 4.248354255291589e-18;  // σ(40), σ(−40) in float64
var COPE_MARKS = {space: ' ', stop: '.', both: ' .'};
function copePositions(text, marks, nposMax) {  // -> Float64Array [len(text)]
  var n = text.length, p = new Float64Array(n), s = 0;
  for (var j = n - 1; j >= 0; j--) { s += marks.indexOf(text[j]) >= 0 ? GATE_ON : GATE_OFF; p[j] = Math.min(s, nposMax - 1); }
  return p;
}
function copeNposMax(full) { return full.get('scheme') === 'cope' ? full.get('npos_max').v : SCHEMA.cope.npos_max; }
// the describe() rows: per word, its first character's token position and CoPE positions
function copeWords(text) {
  var out = [], start = 0;
  for (var i = 0; i <= text.length; i++) {
    if (i < text.length && ' .'.indexOf(text[i]) < 0) continue;
    if (i > start) out.push({word: text.slice(start, i), start: start});
    start = i + 1;
  }
  return out;
}
function copeDescribe(text, nposMax) {  // CoPE.describe(text=...) (posenc show cope), row for row
  var L = text.length, bySpace = copePositions(text, ' ', nposMax), byStop = copePositions(text, '.', nposMax);
  function pad(s, w) { while (s.length < w) s = ' ' + s; return s; }
  return [['contextual positions', 'of each word of ' + strRepr(text) + ', from its last character, when the gates fire ' +
           'on spaces (words) or on full stops (sentences); clamped at npos_max - 1 = ' + (nposMax - 1)]]
    .concat(copeWords(text).map(function (w) {
      return ['  ' + strRepr(w.word), 'token ' + pad(String(L - 1 - w.start), 4) + '   word ' + pad(fmtF(bySpace[w.start], 2), 6)
              + '   sentence ' + pad(fmtF(byStop[w.start], 2), 5)];
    }));
}
function copeSentenceError(text) {
  if (!pyStrip(text)) return 'type a sentence (it is empty)';
  if (text.length > SCHEMA.cope.max_text) return 'at most ' + SCHEMA.cope.max_text + ' characters, got ' + text.length;
  return '';
}
var COPE_ROWS = 40;  // words listed in the table (the chart shows every character)
function figCope(full) {  // full: the SPEC of A or B that is cope; null: the panel is hidden
  var panel = document.getElementById('fig-cope');
  panel.hidden = !full;
  if (!full) { DRAWN['fig-cope'] = {hidden: true}; return; }
  var box = document.getElementById('cope-sentence'), text = box.value, msg = copeSentenceError(text), fig = document.getElementById('fig-cope');
  document.getElementById('cope-error').textContent = msg;
  box.setAttribute('aria-invalid', msg ? 'true' : 'false');
  if (msg) { fig.removeAttribute('data-token-positions'); fig.removeAttribute('data-cope-positions'); return notApplicable('fig-cope', msg); }
  var choice = document.getElementById('cope-marks').value, marks = COPE_MARKS[choice], nmax = copeNposMax(full);
  var L = text.length, p = copePositions(text, marks, nmax), tok = seq(L).map(function (j) { return L - 1 - j; });
  fig.dataset.tokenPositions = JSON.stringify(tok);
  fig.dataset.copePositions = '[' + Array.from(p, floatRepr).join(',') + ']';  // every digit, as Python reads them
  fig.dataset.nposMax = String(nmax);
  var what = choice === 'space' ? 'words' : choice === 'stop' ? 'sentences' : 'words and sentences';
  lineChart('fig-cope', [{x: seq(L), y: tok, label: 'token position i − j'},
                         {x: seq(L), y: Array.from(p), label: 'CoPE position (' + what + ' back)', marks: L <= 120},
                         {x: [0, L - 1], y: [nmax - 1, nmax - 1], label: 'npos_max − 1 = ' + (nmax - 1), dash: [2, 3]}],
            {title: 'positions the last character gives each character (' + L + ' characters)', xlabel: 'character j', ylabel: 'position'});
  var body = document.querySelector('#cope-table tbody'), words = copeWords(text);
  body.textContent = '';
  words.slice(0, COPE_ROWS).forEach(function (w) {
    var tr = document.createElement('tr');
    [w.word, String(L - 1 - w.start), fmtF(p[w.start], 2)].forEach(function (c) { var td = document.createElement('td'); td.textContent = c; tr.appendChild(td); });
    body.appendChild(tr);
  });
  document.getElementById('cope-note').textContent = (words.length > COPE_ROWS ? 'The table lists the first ' + COPE_ROWS + ' of ' + words.length + ' words. ' : '')
    + (full.get('scheme') === 'cope' ? 'npos_max = ' + nmax + ' from the SPEC.' : 'npos_max = ' + nmax + ', CoPE\'s default (choose cope to set it).');
  document.getElementById('fig-cope').querySelector('canvas').setAttribute('aria-label', 'token and CoPE positions of ' + L + ' characters; per word: '
    + words.slice(0, COPE_ROWS).map(function (w) { return w.word + ' ' + (L - 1 - w.start) + ' / ' + fmtF(p[w.start], 2); }).join(', '));
}
