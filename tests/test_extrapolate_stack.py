"""Seeds trained as one stacked model (``posenc.extrapolate.stack``) take, step by step, the steps
each seed takes trained alone: the same losses, weights and evaluations (float32 tolerance)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.extrapolate import vision
from posenc.extrapolate.parts.image import image_runs as image
from posenc.extrapolate.distributed import Dist
from posenc.extrapolate.model import GPTConfig, TinyGPT
from posenc.extrapolate.plan import resolve_scheme
from posenc.extrapolate.profiles import PROFILES, TrainConfig
from posenc.extrapolate.stack import Stack, _clip_per_seed
from posenc.extrapolate.train import train, train_seeds

SEEDS = (3, 11, 12)
CFG = GPTConfig(vocab_size=40, n_layer=2, n_head=2, n_embd=16, mlp_ratio=2)
# grad_clip 0.05: every seed is clipped at every step, each by its own norm
TRAIN = TrainConfig(steps=5, batch_size=4, lr=3e-3, warmup=2, weight_decay=0.1, grad_clip=0.05)


def _batches(seed: int, *, ragged: bool):
    """A seed's batches; ``ragged``: a width and a scored mask that change with the step and the
    seed (the tasks' padded batches), so the stacked batch pads some seeds."""
    g = torch.Generator().manual_seed(seed)

    def next_batch(step: int):
        width = int(torch.randint(5, 13, (1,), generator=g)) if ragged else 12
        tokens = torch.randint(0, CFG.vocab_size, (TRAIN.batch_size, width), generator=g)
        if not ragged:
            return tokens, None
        mask = torch.rand(TRAIN.batch_size, width - 1, generator=g) < 0.6
        mask[:, -1] = True
        return tokens, mask
    return next_batch


def _models(spec, arch: str = "transformer") -> list[TinyGPT]:
    out = []
    for seed in SEEDS:
        torch.manual_seed(seed)
        out.append(TinyGPT(CFG, spec, arch=arch))
    return out


def _assert_same(alone: list[torch.nn.Module], together: list[torch.nn.Module], lr: float = TRAIN.lr) -> None:
    """The same weights, but for the keys' bias: softmax ignores a shift common to every key, so
    its gradient is 0 but for rounding, and AdamW turns rounding noise into steps of up to ``lr``."""
    for a, b in zip(alone, together):
        for (name, p), q in zip(a.named_parameters(), b.parameters()):
            if name.endswith("attn.qkv.bias"):
                c = p.shape[0] // 3
                torch.testing.assert_close(q[c:2 * c], p[c:2 * c], rtol=0, atol=lr * TRAIN.steps, msg=name)
                p, q = torch.cat([p[:c], p[2 * c:]]), torch.cat([q[:c], q[2 * c:]])
            torch.testing.assert_close(q, p, rtol=1e-4, atol=2e-5, msg=name)


@pytest.mark.parametrize(("scheme", "arch", "ragged"), [
    ("rope", "transformer", False),  # rotary under vmap
    ("t5", "transformer", True),  # a learned bias table per seed, padded batches
    ("learned", "hybrid", False),  # a learned additive table per seed, the ssm blocks
])
def test_stacked_seeds_train_as_each_alone(scheme, arch, ragged):
    _, spec = resolve_scheme(scheme, CFG, max_positions=16)
    alone, together = _models(spec, arch), _models(spec, arch)
    expected = [train(m, TRAIN, _batches(s, ragged=ragged), dist=Dist()) for m, s in zip(alone, SEEDS)]
    got = train_seeds(together, TRAIN, [_batches(s, ragged=ragged) for s in SEEDS], dist=Dist(), stacked=True)
    for e, g in zip(expected, got):
        assert len(g) == TRAIN.steps
        torch.testing.assert_close(torch.tensor(g), torch.tensor(e), rtol=1e-5, atol=1e-5)
    _assert_same(alone, together)
    x = torch.randint(0, CFG.vocab_size, (2, 16))  # and they evaluate alike, past the training length
    for a, b in zip(alone, together):
        assert not b.training
        torch.testing.assert_close(b(x), a(x), rtol=1e-4, atol=1e-4)


def test_clipping_is_each_seeds_own():
    """Seed 0's large gradient is clipped as ``clip_grad_norm_`` clips it alone; seed 1's small one
    is left as it is (one norm over all seeds would shrink it)."""
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (3,), ()]
    grads = [torch.randn(2, *s, generator=g) for s in shapes]
    grads[0][0] *= 100
    grads[0][1] *= 1e-3
    grads[1][1] *= 1e-3
    grads[2][1] *= 1e-3
    alone = [[torch.nn.Parameter(torch.zeros(s)) for s in shapes] for _ in range(2)]
    for seed, params in enumerate(alone):
        for p, grad in zip(params, grads):
            p.grad = grad[seed].clone()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    _clip_per_seed(grads, 1.0)
    for seed, params in enumerate(alone):
        for p, grad in zip(params, grads):
            torch.testing.assert_close(grad[seed], p.grad)
    assert torch.linalg.vector_norm(torch.cat([grad[1].flatten() for grad in grads])) < 0.1


def test_stacked_vision_seeds_train_as_each_alone():
    settings = PROFILES["smoke"].image
    spec, _ = image.image_spec("learned grid (resized)", settings)
    cfg = dataclasses.replace(settings.train, steps=5, grad_clip=0.05)
    x_all, y_all = torch.rand(40, 64, 1), torch.randint(0, 10, (40,))
    pos = image.image_positions(8, 8, "integer")

    def batches(seed):
        g = torch.Generator().manual_seed(seed)
        return lambda step: (lambda idx: (x_all[idx], pos, y_all[idx]))(torch.randint(40, (8,), generator=g))

    def models():
        out = []
        for seed in SEEDS:
            torch.manual_seed(seed)
            out.append(vision.SetTransformer(settings.model, spec, in_dim=1, classes=10))
        return out

    alone, together = models(), models()
    expected = [vision.fit_classifier(m, cfg, batches(s)) for m, s in zip(alone, SEEDS)]
    got = vision.fit_classifiers(together, cfg, [batches(s) for s in SEEDS], stacked=True)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-5, atol=1e-5)
    _assert_same(alone, together)


def test_a_stack_takes_one_architecture():
    _, rope = resolve_scheme("rope", CFG, max_positions=12)
    _, t5 = resolve_scheme("t5", CFG, max_positions=12)
    with pytest.raises(ValueError, match="same parameters"):
        Stack([TinyGPT(CFG, rope), TinyGPT(CFG, t5)])
    with pytest.raises(ValueError, match="one model per seed"):
        Stack([])
    with pytest.raises(ValueError, match="one batch function per model"):
        train_seeds(_models(rope), TRAIN, [_batches(0, ragged=False)], dist=Dist())


def test_a_runs_seeds_trained_together_record_what_each_alone_records(tmp_path, monkeypatch):
    """The driver trains a configuration's seeds as one stacked model (here on the CPU too): seed
    1's records (losses, every evaluation) match those of seed 1 run alone; the records keep
    their fields, one per seed."""
    from posenc.cli import main
    from posenc.extrapolate import stack
    from posenc.stats.results import load

    monkeypatch.setattr(stack, "STACK_DEVICES", ("cpu",))

    args = ["extrapolate", "--profile", "smoke", "--threads", "1", "--no-progress", "--jobs", "1",
            "--part", "lm", "--part", "tasks", "--part", "time", "--scheme", "t5"]
    assert main([*args, "--seeds", "0,1", "--out", str(tmp_path / "both.jsonl")]) == 0
    assert main([*args, "--seeds", "1", "--out", str(tmp_path / "one.jsonl")]) == 0
    both, one = load(tmp_path / "both.jsonl"), load(tmp_path / "one.jsonl")
    assert set(one) < set(both) and len(both) == 2 * len(one)  # the same keys: a record per seed
    for key, alone in one.items():
        together = both[key]
        assert set(together) == set(alone)
        torch.testing.assert_close(torch.tensor(together["train_loss"]), torch.tensor(alone["train_loss"]),
                                   rtol=1e-5, atol=1e-5)
        for a, b in zip(alone["eval"], together["eval"]):
            assert set(a) == set(b)
            for name in ("nll", "accuracy", "token_acc"):
                if name in a:
                    assert b[name] == pytest.approx(a[name], abs=1e-4), (alone["part"], name)


def test_part_seeds_give_one_part_its_own_seeds_and_seeds_sets_every_part():
    """``part_seeds`` trains one part (here language modelling alone) on seeds 0, 1, 2 and the other
    parts and the hybrid rows on ``seeds``; ``--seeds`` sets every part's."""
    import dataclasses

    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.profiles import with_overrides

    def seeds_by_part(profile):
        seeds: dict[tuple[str, str], set[int]] = {}
        for r in plan(profile, list(profile.schemes), corpus_sha="0", log=lambda msg: None):
            seeds.setdefault((r.part, r.arch), set()).add(r.seed)
        return seeds

    quick = PROFILES["quick"]  # make report's: three seeds for every part it runs (the tasks are the full profile's)
    assert seeds_by_part(quick) == {("lm", "transformer"): {0, 1, 2}, ("lm", "hybrid"): {0, 1, 2},
                                    ("scaling", "transformer"): {0, 1, 2},
                                    ("image", "transformer"): {0, 1, 2}, ("time", "transformer"): {0, 1, 2}}
    seeds = seeds_by_part(dataclasses.replace(quick, seeds=(0,), part_seeds=(("lm", (0, 1, 2)),)))
    assert seeds.pop(("lm", "transformer")) == {0, 1, 2}
    assert seeds and all(s == {0} for s in seeds.values()), seeds
    mine = plan(with_overrides(quick, seeds=(4, 5)), list(quick.schemes), corpus_sha="0", log=lambda msg: None)
    assert {r.seed for r in mine if r.part != "lm"} == {r.seed for r in mine if r.part == "lm"} == {4, 5}
