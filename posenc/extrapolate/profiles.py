"""Benchmark profiles: how big, how long, which schemes. ``smoke`` (tests, seconds), ``quick``
(``make report``: minutes on 2 CPU cores; three seeds, the fewest a verdict rests on, for every
part it runs: language modelling, the scalings, images and time; the tasks and the
language-modelling rows of positions that depend on content are left to the full profile, as
three seeds of them do not fit its time), ``full`` (three seeds everywhere; bigger, longer).

The seeds of one configuration run together; where it pays they train as one stacked model
(``posenc.extrapolate.stack``), but on a CPU that costs what training them one by one costs
(measured with ``docs/bench_seeds.py``: the models are small but each step is already
arithmetic, not overhead), so there they train one by one and three seeds cost three times one
seed's time. ``part_seeds`` gives a part other seeds than ``seeds`` (``--seeds`` sets them all).
The quick profile runs every part it has on three seeds and leaves out the tasks, whose models
cost the most, and the content rows (``lm_rows``), so that ``make report`` stays within 10 minutes
(measured: docs/numbers.md).

Issue 38's rows: Dual Chunk Attention applied zero-shot to the trained RoPE models beside the
scalings (``dual_chunk``; every profile: an evaluation, about 1% of ``make report``'s time,
docs/numbers.md); PoPE and FoPE against RoPE past L (``LENGTH_LM_ROWS``) are the full profile's.

The structured positions' rows (``posenc.extrapolate.parts.structure``): the quick profile adds only HiRoPE
applied zero-shot to its trained RoPE models (evaluation, no training); BiPE's two
language-modelling rows (``bipe_rows``), the addition rows with Abacus and coupled positions and
the randomized positions are the full profile's (and the smoke profile's, tiny).

Every setting that changes a number is in these dataclasses; their hash is part of each
result's key, so changing a setting re-runs what it affects and nothing else. The architecture
(``arch``, and the ``hybrid`` rows beside the transformer's) is part of each run's key instead
(``posenc.extrapolate.plan.Run``), so transformer results keep their keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from posenc._validate import check_choice
from posenc.extrapolate.model import ARCHS, GPTConfig
from posenc.extrapolate import PART_NAMES
from posenc.extrapolate.task_generators import ALGORITHMIC, CONTENT

BENCH_VERSION = 2  # bump when the protocol changes, so old results are not reused
# every part a user picks (``posenc.extrapolate.PART_NAMES``) but ``pretrained`` (hours of a pretrained LLM on a
# CPU: the full profile and ``--part pretrained`` pick it): a profile's default
DEFAULT_PARTS = tuple(p for p in PART_NAMES if p != "pretrained")

DEFAULT_SCHEMES = ("nope", "sinusoidal", "learned", "rope", "alibi", "t5", "kerple", "fire")
def content_lm_rows(n_layer: int) -> tuple[str, ...]:
    """The language-modelling rows for a model of ``n_layer`` attention blocks: positions that
    depend on content (FoX with its full gate and reduced to its bias, CoPE, DAPE around
    KERPLE, stick-breaking) and Llama 4's RoPE/NoPE layer pattern (NoPE with its query temperature
    in one block of four, RoPE in the rest; a model whose blocks are not a multiple of 4 runs it
    in one block of two, the closest it has). Their claims:
    ``posenc.extrapolate.parts.lm.content_verdicts``."""
    pattern = ["rope"] * (3 if n_layer % 4 == 0 else 1) + ["nope_temperature"]
    return ("fox", "fox:gate=bias_only", "cope", "dape", "stick_breaking", json.dumps(pattern))


CONTENT_LM_ROWS = content_lm_rows(4)
"""The rows of a 4-layer model (the full profile's), with Llama 4's pattern as it is."""
LENGTH_LM_ROWS = ("pope", "fope")
"""PoPE and FoPE, whose papers claim they generalise past the training length better than RoPE: the
full profile's language-modelling rows after the content ones (their claims:
``posenc.extrapolate.parts.lm.length_verdicts``; FoPE's ``max_positions`` is the training length)."""
CONTENT_TASK_SCHEMES = ("learned", "shaw", "cope")
"""The schemes that learn the content tasks by default: one of each kind in CoPE's counting claim,
absolute (a learned table), relative (Shaw et al.'s learned vector per distance, the paper's
relative PE) and contextual (``posenc.extrapolate.parts.tasks.COPE_ORDER``)."""


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 800  # optimizer steps
    batch_size: int = 16  # global batch (split across DDP ranks)
    lr: float = 2e-3  # peak AdamW learning rate
    warmup: int = 40  # linear warm-up steps, then cosine decay to lr / 10
    weight_decay: float = 0.1  # on matrices and embeddings (nanoGPT), not on biases or norms
    grad_clip: float = 1.0  # max global gradient norm


@dataclass(frozen=True)
class LMSettings:
    model: GPTConfig = GPTConfig()
    train: TrainConfig = TrainConfig()
    train_length: int = 64  # L: training window
    multipliers: tuple[float, ...] = (1, 1.5, 2, 4, 8, 16)  # evaluation lengths = L x these
    heldout_tokens: int = 32768  # the held-out stream (rounded down to a multiple of every length)
    corpus_bytes: int = 2_000_000  # draw this much of the corpus (whole documents, ``posenc.extrapolate.data``)
    data_seed: int = 0  # the draw of documents, so the split: the same for every training seed
    eval_tokens: int = 16384  # tokens per evaluation forward pass (batch = eval_tokens // length)

    def lengths(self) -> list[int]:
        return [int(round(self.train_length * m / 2)) * 2 for m in self.multipliers]


@dataclass(frozen=True)
class ScalingSettings:
    types: tuple[str, ...] = ("linear", "ntk", "yarn")  # RoPE scalings applied to the trained RoPE
    finetune_factor: int = 4  # fine-tune at factor x L with scaling factor = factor
    finetune_steps: int = 100  # steps of the short fine-tune (same tokens per step as training)
    finetune_lr: float = 5e-4


@dataclass(frozen=True)
class TaskSettings:
    model: GPTConfig = GPTConfig(vocab_size=32)
    train: TrainConfig = TrainConfig()
    tasks: tuple[str, ...] = ALGORITHMIC  # the tasks one model learns (posenc.extrapolate.task_generators.TASKS)
    max_size: int = 8  # train on sizes 1..max_size (items, digits; passkey: 4n filler tokens)
    test_sizes: tuple[int, ...] = (8, 12, 16, 24, 32)  # evaluate at these sizes (the first is in-distribution)
    eval_examples: int = 200  # per task and size; the same examples for every scheme and seed

    def sizes(self) -> list[int]:
        return list(self.test_sizes)


@dataclass(frozen=True)
class ImageSettings:
    model: GPTConfig = GPTConfig(vocab_size=2, n_layer=2, n_head=4, n_embd=64, mlp_ratio=2)
    train: TrainConfig = TrainConfig(steps=300, batch_size=64, lr=2e-3, warmup=20)
    grid: int = 8  # training grid: the digits' own 8×8 pixels, one token each
    test_grids: tuple[int, ...] = (8, 12, 16, 24)  # the test grids of every condition
    test_fraction: float = 0.3  # of the 1,797 digits, drawn once with a fixed seed
    # the smoke and full profiles' (the quick profile names its own): Heo et al.'s variants, then DINOv3's coordinates
    # without and with its training-time rescaling (issue 38; two more models do not fit make report's time)
    variants: tuple[str, ...] = ("none", "learned grid (resized)", "2D sinusoidal", "axial RoPE", "RoPE-Mixed",
                                 "DINOv3 RoPE", "DINOv3 RoPE (rescale 2)")
    augments: tuple[str, ...] = ("none", "scale")  # training: as they are; at a random scale and offset
    scale_range: tuple[float, float] = (0.6, 1.8)  # scale augmentation: the side's scale, log-uniform (> 1: a crop)
    conditions: tuple[str, ...] = ("zoom", "canvas")  # test: resampled to the grid; at trained size on a larger one
    canvas_grids: tuple[int, ...] | None = None  # the canvas condition's grids (None: the test grids past training)
    augmented_variants: tuple[str, ...] | None = None  # the variants trained with augmentation too (None: every one)


@dataclass(frozen=True)
class TimeSettings:
    model: GPTConfig = GPTConfig(vocab_size=2, n_layer=2, n_head=4, n_embd=64, mlp_ratio=2)
    train: TrainConfig = TrainConfig(steps=400, batch_size=64, lr=2e-3, warmup=20)
    train_rate: float = 10.0  # frames per second
    train_seconds: float = 4.0  # clip duration
    test: tuple[tuple[float, float], ...] = ((10.0, 4.0), (20.0, 4.0), (5.0, 4.0), (10.0, 8.0), (20.0, 8.0))
    gap_seconds: float = 1.0  # the threshold the label asks about
    frame_dim: int = 8
    eval_examples: int = 400  # per (rate, duration): the same examples for every scheme and seed
    schemes: tuple[str, ...] = ("nope", "sinusoidal", "rope")


@dataclass(frozen=True)
class VideoSettings:
    """The time part's video protocol (``posenc.extrapolate.parts.time``): the three-axis schemes
    (M-RoPE, VideoRoPE) read each frame as a grid of patches. Hashed into the video runs' keys only,
    so the one-axis time runs keep theirs."""
    grid: tuple[int, int] = (2, 2)  # patches per frame (rows, columns): T·4 tokens a clip
    temporal_spacing: float = 2.0  # VideoRoPE's δ between frames (the paper's runs: 2)
    # the video model's heads: one head of d_model dims (64 at the quick and full settings), so M-RoPE's chunked
    # sections give time 8 of 32 pairs, as Qwen2-VL's 16 of 64; with 4 heads of 16 (2 of 8 pairs) M-RoPE stayed at
    # chance after 200 and after 800 steps, with 1 head of 64 it reached 0.53 in 200 (one seed, measured)
    n_head: int = 1


VIDEO = VideoSettings()
VIDEO_SCHEMES = ("mrope", "videorope")
"""The time part's video rows: M-RoPE (Qwen2-VL's chunked sections) and VideoRoPE, whose paper claims it
extrapolates to longer videos better (``posenc.extrapolate.parts.time.video_verdicts``): the smoke and full
profiles' (two models of four times the tokens of a time run do not fit make report's time; docs/numbers.md)."""


@dataclass(frozen=True)
class HiRoPESettings:
    """HiRoPE applied zero-shot to the trained ``rope`` model (no training): its pairs split between
    the token and the line (``posenc.extrapolate.structured_positions.lines_and_tokens``)."""
    token_dims: int | None = None  # rotated dims that keep the token position (None: hirope's default, half)
    window: int | None = None  # tokens that keep their plain position on every pair (None: the training length)


@dataclass(frozen=True)
class AdditionSettings:
    """Multi-digit addition learned alone, trained on up to ``tasks.max_size`` digits and tested to
    ``tasks.test_sizes`` (at least 3x), with Abacus and coupled positions against plain schemes."""
    tasks: TaskSettings = TaskSettings(tasks=("add",), max_size=10, test_sizes=(10, 20, 30))
    schemes: tuple[str, ...] = ("abacus", "coupling", "rope", "nope", "alibi")  # abacus, coupling: positions
    offset_max: int | None = None  # the random training offset's largest value (None: the largest test size)

    def offset(self) -> int:
        """The largest training offset: with it every position of a test number is trained."""
        return max(self.tasks.test_sizes) if self.offset_max is None else self.offset_max


STRUCTURE_POSITIONS = ("abacus", "coupling")
"""The addition rows whose positions come from the digits (a learned table over them, NoPE attention)."""
BIPE_ROWS = ("bipe", "bipe_bias:bias_scale=96")
"""BiPE with RoPE and with ALiBi between segments (lines of the source code); the ALiBi one with
the official code's slopes x 96 (``posenc.encodings.bipe``). Their claims:
``posenc.extrapolate.parts.structure``."""


@dataclass(frozen=True)
class Profile:
    name: str
    seeds: tuple[int, ...]
    schemes: tuple[str, ...]
    lm: LMSettings
    scaling: ScalingSettings
    tasks: TaskSettings
    parts: tuple[str, ...] = DEFAULT_PARTS
    image: ImageSettings = ImageSettings()
    time: TimeSettings = TimeSettings()
    description: str = ""
    arch: str = "transformer"  # the model of the scheme runs: posenc.extrapolate.model.ARCHS (--arch)
    hybrid: tuple[str, ...] = ()  # arch "transformer" only: these schemes also run as hybrids, beside it
    hybrid_parts: tuple[str, ...] = ("lm",)  # the parts the hybrid rows run in
    # (part, seeds) for the parts that train other seeds than ``seeds``; "hybrid" names the hybrid rows
    part_seeds: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # SPECs the language-modelling part runs after ``schemes`` unless --scheme replaces the list
    # (content_lm_rows), on the seeds of "lm_rows" in ``part_seeds`` (else the lm part's); run keys of
    # the other rows are unchanged by them
    lm_rows: tuple[str, ...] = ()
    # the content tasks (counting, selective copy, flip-flop) learned by models of their own, one per
    # scheme of ``content_task_schemes`` (--scheme: the user's), on the seeds of "content_tasks" in
    # ``part_seeds`` (else the tasks part's); None: no such models (``tasks`` may hold them: one model per scheme learns every task)
    content_tasks: TaskSettings | None = None
    content_task_schemes: tuple[str, ...] = ()
    # the schemes whose models learn ``tasks`` (--scheme: the user's); None: ``schemes``
    task_schemes: tuple[str, ...] | None = None
    # the structured positions' rows (posenc.extrapolate.parts.structure), transformer only: BiPE's language-modelling
    # rows on the lm part's seeds; HiRoPE zero-shot on the trained rope models (the scaling part's seeds,
    # wherever the scalings run); addition learned alone with Abacus and coupled positions; the schemes
    # trained on ``tasks`` with Ruoss et al.'s randomized positions up to ``randomized_max_positions``
    # (--scheme replaces the BiPE, addition and randomized rows, as it does ``lm_rows``)
    bipe_rows: tuple[str, ...] = ()
    hirope: HiRoPESettings | None = None
    addition: AdditionSettings | None = None
    randomized: tuple[str, ...] = ()
    randomized_max_positions: int = 512
    # Dual Chunk Attention applied zero-shot to the trained rope models, beside the RoPE scalings (the
    # scaling part's seeds; posenc.extrapolate.parts.scaling.dual_chunk_spec)
    dual_chunk: bool = False

    def seeds_for(self, part: str, within: str | None = None) -> tuple[int, ...]:
        """The seeds ``part`` trains: its entry in ``part_seeds``, else the seeds of ``within`` (the
        part whose rows they are: "lm_rows" within "lm", "content_tasks" within "tasks"), else ``seeds``."""
        given = dict(self.part_seeds)
        if part in given:
            return given[part]
        return self.seeds_for(within) if within is not None else self.seeds

    @property
    def all_seeds(self) -> tuple[int, ...]:
        """Every seed some part trains, in order."""
        return tuple(sorted({*self.seeds, *(s for _, seeds in self.part_seeds for s in seeds)}))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def settings_hash(obj: Any) -> str:
    """A stable hash of any JSON-able settings (dataclasses included)."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    text = json.dumps({"bench_version": BENCH_VERSION, "settings": obj}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


QUICK_CONTENT_TASKS = TaskSettings(
    model=GPTConfig(vocab_size=32, n_layer=2, n_head=4, n_embd=64),
    train=TrainConfig(steps=1500, batch_size=64, lr=3e-3), tasks=CONTENT, max_size=6,
    test_sizes=(6, 8, 10, 12, 18), eval_examples=150)
"""The quick profile's tasks settings, on the content tasks."""

PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke", seeds=(0,), schemes=("nope", "sinusoidal", "learned", "rope", "alibi", "t5"),
        lm=LMSettings(model=GPTConfig(n_layer=2, n_head=2, n_embd=16, mlp_ratio=2),  # 2: a hybrid needs two
                      train=TrainConfig(steps=12, batch_size=8, warmup=2), train_length=16,
                      multipliers=(1, 2, 4), heldout_tokens=256, corpus_bytes=60_000, eval_tokens=256),
        scaling=ScalingSettings(types=("linear", "yarn"), finetune_steps=3),
        tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=2, n_head=2, n_embd=16, mlp_ratio=2),
                           train=TrainConfig(steps=8, batch_size=4, warmup=2), max_size=2,
                           test_sizes=(2, 4), eval_examples=8),
        image=ImageSettings(model=GPTConfig(vocab_size=2, n_layer=1, n_head=2, n_embd=16, mlp_ratio=2),
                            train=TrainConfig(steps=4, batch_size=8, warmup=1), test_grids=(8, 12),
                            test_fraction=0.05),
        time=TimeSettings(model=GPTConfig(vocab_size=2, n_layer=1, n_head=2, n_embd=16, mlp_ratio=2),
                          train=TrainConfig(steps=4, batch_size=8, warmup=1), test=((10.0, 4.0), (20.0, 8.0)),
                          eval_examples=16, schemes=("nope", "sinusoidal", "rope", *VIDEO_SCHEMES)),
        description="seconds; exercises every code path, numbers mean nothing",
        hybrid=("nope", "rope"),
        content_tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=2, n_head=2, n_embd=16, mlp_ratio=2),
                                   train=TrainConfig(steps=8, batch_size=4, warmup=2), max_size=2,
                                   test_sizes=(2, 4), eval_examples=8, tasks=CONTENT),
        content_task_schemes=CONTENT_TASK_SCHEMES,
        bipe_rows=BIPE_ROWS, hirope=HiRoPESettings(),
        addition=AdditionSettings(tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=1, n_head=2, n_embd=16,
                                                                     mlp_ratio=2),
                                                     train=TrainConfig(steps=4, batch_size=4, warmup=1), tasks=("add",),
                                                     max_size=2, test_sizes=(2, 6), eval_examples=8)),
        randomized=("rope",), randomized_max_positions=64, dual_chunk=True,
    ),
    "quick": Profile(
        name="quick", seeds=(0, 1, 2), schemes=DEFAULT_SCHEMES,
        # every part it runs on three seeds, the fewest a verdict rests on; the tasks (and the content rows of
        # language modelling) cost more than three seeds of them fit in make report's time: the full profile
        # runs them (docs/numbers.md), and --part tasks runs this profile's on three seeds
        parts=("lm", "scaling", "image", "time"),
        # evaluation: no 1.5L (no claim reads it) and 16,384 held-out bytes (24,576 before): a claim's error is
        # the spread of its seeds, which holds the held-out noise and the larger spread between training runs
        # training: 400 steps of 32 windows (the tokens of 800 of 16 at 17% less CPU, measured as process time), the
        # peak learning rate raised with the batch (3e-3, about √2 × 2e-3); the fine-tunes keep their tokens
        lm=LMSettings(model=GPTConfig(n_layer=2, n_head=4, n_embd=64),
                      train=TrainConfig(steps=400, batch_size=32, lr=3e-3, warmup=20), train_length=32,
                      multipliers=(1, 2, 4, 8, 16), heldout_tokens=16_384, corpus_bytes=1_500_000),
        scaling=ScalingSettings(finetune_steps=30),
        tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=2, n_head=4, n_embd=64),
                           train=TrainConfig(steps=1500, batch_size=64, lr=3e-3), max_size=6,
                           test_sizes=(6, 8, 10, 12, 18), eval_examples=150),
        # images: the protocol of Heo et al.'s claims alone (scale-augmented training) for their three variants
        # and the baseline without positions, three seeds each; training on the digits as they are and the 2D
        # sinusoidal variant are the full profile's (their rows carry no claim, and three seeds of them do not
        # fit make report's time); the canvas at 16 alone
        image=ImageSettings(train=TrainConfig(steps=200, batch_size=64, lr=3e-3, warmup=20), test_grids=(8, 12, 16),
                            canvas_grids=(16,), augments=("scale",),
                            variants=("none", "learned grid (resized)", "axial RoPE", "RoPE-Mixed")),
        time=TimeSettings(train=TrainConfig(steps=200, batch_size=64, lr=3e-3, warmup=20)),
        description="three seeds for every part it runs: language modelling with hybrid rows, RoPE scalings, images "
                    "and time, a 2-layer width-64 model trained at 32 bytes; the tasks and the rows of positions that "
                    "depend on content are the full profile's: under 10 minutes on 2 idle CPU cores",
        hybrid=("nope", "rope"),
        content_tasks=QUICK_CONTENT_TASKS, content_task_schemes=CONTENT_TASK_SCHEMES,
        # the algorithmic tasks: the five schemes of Kazemnejad et al.'s order (the learned table cannot run past
        # its length, KERPLE and FIRE have no claim there); the content tasks' models take their time
        task_schemes=("nope", "sinusoidal", "rope", "alibi", "t5"),
        # the structured positions: HiRoPE zero-shot on the trained RoPE models (evaluation only); BiPE's two rows, the addition
        # and randomized rows are the full profile's (three seeds of BiPE's would pass make report's time)
        bipe_rows=(), hirope=HiRoPESettings(), dual_chunk=True,
    ),
    "full": Profile(
        name="full", seeds=(0, 1, 2), schemes=DEFAULT_SCHEMES, parts=PART_NAMES,
        lm=LMSettings(model=GPTConfig(n_layer=4, n_head=4, n_embd=128),
                      train=TrainConfig(steps=2000, batch_size=16), train_length=64,
                      multipliers=(1, 1.5, 2, 4, 8, 16), heldout_tokens=65_536, corpus_bytes=4_000_000),
        scaling=ScalingSettings(finetune_steps=200),
        tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=4, n_head=4, n_embd=128),
                           train=TrainConfig(steps=4000, batch_size=64, lr=3e-3), max_size=10,  # 800 a task
                           test_sizes=(10, 13, 15, 20, 30, 40), eval_examples=300),
        image=ImageSettings(train=TrainConfig(steps=600, batch_size=64, lr=3e-3, warmup=40),
                            test_grids=(8, 10, 12, 16, 24)),
        time=TimeSettings(train=TrainConfig(steps=800, batch_size=64, lr=3e-3, warmup=40),
                          schemes=("nope", "sinusoidal", "rope", *VIDEO_SCHEMES)),
        description="three seeds, d=128, 4 layers: hours on 2 CPU cores, minutes on a GPU",
        hybrid=("nope", "rope", "alibi", "sinusoidal"), hybrid_parts=("lm", "tasks"),
        lm_rows=(*CONTENT_LM_ROWS, *LENGTH_LM_ROWS),
        content_tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=4, n_head=4, n_embd=128),
                                   train=TrainConfig(steps=4000, batch_size=64, lr=3e-3), max_size=10,
                                   tasks=CONTENT, test_sizes=(10, 13, 15, 20, 30, 40), eval_examples=300),
        content_task_schemes=(*CONTENT_TASK_SCHEMES, "t5", "nope", "rope", "fox", "stick_breaking"),
        bipe_rows=BIPE_ROWS, hirope=HiRoPESettings(),
        addition=AdditionSettings(tasks=TaskSettings(model=GPTConfig(vocab_size=32, n_layer=4, n_head=4, n_embd=128),
                                                     train=TrainConfig(steps=4000, batch_size=64, lr=3e-3),
                                                     tasks=("add",), max_size=10, test_sizes=(10, 15, 20, 30),
                                                     eval_examples=300)),
        randomized=("sinusoidal", "rope", "alibi"), randomized_max_positions=512, dual_chunk=True,
    ),
}


QUICK = PROFILES["quick"]
DECIDE_ADDITION = AdditionSettings(tasks=TaskSettings(
    model=GPTConfig(vocab_size=32, n_layer=2, n_head=4, n_embd=64), train=TrainConfig(steps=1500, batch_size=64, lr=3e-3),
    tasks=("add",), max_size=6, test_sizes=(6, 12, 18), eval_examples=150))
"""The decide profile's addition: the quick tasks' model, trained on up to 6 digits, tested at 3× (18)."""

PROFILES["decide"] = dataclasses.replace(
    QUICK, name="decide", parts=DEFAULT_PARTS,
    # every row a claim of the page reads, at the quick profile's settings (its model, its training, its three
    # seeds): the quick rows, then what make report leaves out: the tasks (Kazemnejad et al.'s five schemes,
    # Golovneva et al.'s content tasks), the content and length rows of language modelling, BiPE's rows,
    # addition with Abacus and coupled positions, RoPE with randomized positions, DINOv3's two image variants
    # and the video rows. Its records are kept (posenc/extrapolate/records/decide.*) and fill the quick page.
    lm_rows=(*content_lm_rows(QUICK.lm.model.n_layer), *LENGTH_LM_ROWS),
    image=dataclasses.replace(QUICK.image, variants=(*QUICK.image.variants, "DINOv3 RoPE", "DINOv3 RoPE (rescale 2)")),
    time=dataclasses.replace(QUICK.time, schemes=(*QUICK.time.schemes, *VIDEO_SCHEMES)),
    bipe_rows=BIPE_ROWS, addition=DECIDE_ADDITION, randomized=PROFILES["full"].randomized, randomized_max_positions=256,
    description="every claim of the page at the quick profile's settings and three seeds: the quick rows, the "
                "tasks, the content and length rows, BiPE, addition and randomized positions, DINOv3 and video; "
                "about 1.5 CPU-hours (docs/numbers.md), the run whose kept records fill make report's page",
)


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}; got {name!r}")
    return PROFILES[name]


def with_overrides(profile: Profile, *, seeds: tuple[int, ...] | None = None,
                   schemes: tuple[str, ...] | None = None, parts: tuple[str, ...] | None = None,
                   arch: str | None = None) -> Profile:
    """The profile with the user's seeds, schemes, parts and architecture (the run keys change accordingly)."""
    changes: dict[str, Any] = {}
    if arch is not None:
        changes["arch"] = check_choice("arch", arch, ARCHS)
    if seeds is not None:  # the user's seeds, for every part
        changes["seeds"], changes["part_seeds"] = tuple(seeds), ()
    if schemes is not None:
        changes["schemes"] = tuple(schemes)
    if parts is not None:
        changes["parts"] = tuple(parts)
    return dataclasses.replace(profile, **changes)

