import math
from cellplot import bars, show

d = 4  # three words of four numbers each: change them
words = {"dog": [1.0, 0.0, 0.5, -0.5],
         "bites": [0.0, 1.0, -0.5, 0.5],
         "man": [0.5, -0.5, 1.0, 0.0]}


def attention(x):  # softmax(QKᵀ/√d)·V with Q = K = V = x, one head
    out = []
    for q in x:
        scores = [sum(a * b for a, b in zip(q, k)) / math.sqrt(d) for k in x]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        out.append([sum(w * v[c] for w, v in zip(weights, x)) / total for c in range(d)])
    return out


def sinusoidal(pos):  # PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...)
    angles = [pos / 10000 ** (2 * i / d) for i in range(d // 2)]
    return [f(a) for a in angles for f in (math.sin, math.cos)]


def embed(sentence, positions=False):  # a vector per word, plus PE(pos) if asked
    x = [list(words[w]) for w in sentence.split()]
    if positions:
        x = [[a + b for a, b in zip(v, sinusoidal(pos))] for pos, v in enumerate(x)]
    return x


def gaps(a, b):  # each word's output in one sentence against the other
    return [max(abs(u - v) for u, v in zip(a[i], b[len(b) - 1 - i])) for i in range(len(a))]


first, second = "dog bites man", "man bites dog"
plain = attention(embed(first)), attention(embed(second))
with_pe = attention(embed(first, True)), attention(embed(second, True))
show("plain_first", plain[0])
show("plain_second", plain[1])
show("pe_first", with_pe[0])
show("pe_second", with_pe[1])
print("no positions: each output moves, unchanged; largest gap", max(gaps(*plain)))
print("sinusoidal PE added: the outputs differ; largest gap", max(gaps(*with_pe)))
bars(first.split(), [("no positions", gaps(*plain)),
                     ("sinusoidal PE added", gaps(*with_pe))],
     title=f'each word\'s output: "{first}" vs "{second}"', ylabel="largest difference")
