"""``posenc extrapolate`` (train short, test long) and ``posenc report`` (the benchmark and the
analysis as one offline HTML page)."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
from pathlib import Path

from posenc.cli import CLIError, check_output_file, int_arg, parse_int, require_extra
from posenc.extrapolate import PART_NAMES  # the --part choices (no torch)

PROFILE_NAMES = ("smoke", "quick", "decide", "full")  # posenc.extrapolate.profiles.PROFILES (not imported: torch)
CONTEXT_PARALLEL = ("ring", "ulysses")  # posenc.extrapolate.context_parallel.METHODS (not imported: torch)
ARCH_NAMES = ("transformer", "hybrid", "llama")  # posenc.extrapolate.model.ARCHS (not imported here: it imports torch)


def _seeds(text: str) -> tuple[int, ...]:
    """``--seeds 0,1,2``: non-negative integers within int64 (``parse_int``: torch takes no larger seed)."""
    how = "comma-separated non-negative integers like 0,1,2"
    try:
        seeds = tuple(parse_int("--seeds", s, low=0) for s in text.split(",") if s.strip())
    except ValueError:
        too_big = all(s.strip().lstrip("+").isdigit() for s in text.split(",") if s.strip())
        raise ValueError(f"--seeds must be {how}, each at most 2^63 - 1; got {text!r}" if too_big else
                         f"--seeds must be {how}; got {text!r}") from None
    if not seeds:
        raise ValueError(f"--seeds must be {how}; got {text!r}")
    return tuple(dict.fromkeys(seeds))


def _positive(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _common(p: argparse.ArgumentParser, *, default_profile: str) -> None:
    p.add_argument("--profile", choices=PROFILE_NAMES, default=default_profile,
                   help="smoke: seconds (tests); quick: minutes on 2 CPU cores; decide: every claim of the page at "
                        "quick's settings (about 1.5 CPU-hours); full: 3 seeds of larger models (days) "
                        f"(default {default_profile})")
    p.add_argument("--scheme", action="append", metavar="SPEC", dest="schemes",
                   help="a scheme to run instead of the profile's list (repeatable): a name, name:key=value,... "
                        "or a JSON file; sizes come from the model. A JSON list of SPECs is a per-layer pattern "
                        "repeated over the attention blocks, e.g. '[\"rope\", \"nope_temperature\"]'")
    p.add_argument("--part", action="append", choices=PART_NAMES, dest="parts",
                   help="run only these parts (repeatable): lm, scaling, tasks, image (digits at larger grids), "
                        "time (frame rates and durations) (default: the profile's)")
    p.add_argument("--seeds", type=str, default=None, help="comma-separated seeds (default: the profile's)")
    p.add_argument("--arch", choices=ARCH_NAMES, default=None,
                   help="the model of the scheme runs: transformer (default), hybrid: every other attention "
                        "block replaced by an ssm block (Jamba-style; the profile's hybrid rows run beside "
                        "transformer ones), or llama: transformers' LlamaForCausalLM of the profile's size with "
                        "each scheme put in by posenc.interop.patch (needs the peers extra)")
    p.add_argument("--corpus", metavar="FILE", default=None,
                   help="a text file for language modelling (default: the Python standard library's sources)")
    p.add_argument("--jobs", type=int_arg("--jobs"), default=None,
                   help="runs in parallel, one worker process each (default: one per CPU; 1 under torchrun)")
    p.add_argument("--threads", type=int_arg("--threads"), default=None,
                   help="torch threads per process (default: 1 with parallel jobs, else CPUs / processes)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--executor", metavar="WHERE", type=_executor, default=None,
                   help="local: worker processes on this machine (--jobs; the default); ray: each run a task on a "
                        "Ray cluster started here, bound to 127.0.0.1 (or the one RAY_ADDRESS names); ray://HOST:PORT: "
                        "an existing Ray cluster (pip install 'posenc[cluster]'; docs/guide/benchmark.md#cluster)")
    p.add_argument("--dry-run", action="store_true",
                   help="print only the plan's estimated cost (CPU-hours, and hours with the workers) and exit")


def _executor(text: str) -> str:
    """``--executor``: local, ray or ray://HOST:PORT (``posenc.extrapolate.cluster.check_executor``)."""
    if text in ("local", "ray"):
        return text
    host, sep, port = text[len("ray://"):].rpartition(":") if text.startswith("ray://") else ("", "", "")
    if host and sep and port.isdigit() and 0 < int(port) < 65536:
        return text
    raise argparse.ArgumentTypeError(f"must be local, ray or ray://HOST:PORT, got {text!r}")


def _profile(args: argparse.Namespace):
    """The profile with the user's flags; the ``--plugin`` modules' schemes join its list (after its
    own) unless ``--scheme`` names the list."""
    from posenc import plugins
    from posenc.extrapolate.profiles import get_profile, with_overrides

    profile = get_profile(args.profile)
    added = [] if args.schemes else plugins.schemes_of(plugins.load(getattr(args, "plugins", None)))
    return with_overrides(profile, seeds=_seeds(args.seeds) if args.seeds else None,
                          schemes=(*profile.schemes, *added) if added else None,
                          parts=tuple(dict.fromkeys(args.parts)) if args.parts else None, arch=args.arch)


CORPUS_CHECK_BYTES = 1 << 20  # the start of a --corpus file that must read as UTF-8 text


def _corpus(path: str | None) -> str | None:
    """Checks ``--corpus`` before any work: an existing, readable, non-empty UTF-8 text file.

    Binary files are refused (decision): the model would read any bytes, but its perplexity
    would then say nothing about language, which is what the benchmark compares.
    """
    if path is None:
        return None
    if not os.path.exists(path):
        raise CLIError(f"--corpus {path!r} does not exist")
    if not os.path.isfile(path):
        raise CLIError(f"--corpus {path!r} is not a file (a folder or a device); give one text file")
    try:
        with open(path, "rb") as f:
            head = f.read(CORPUS_CHECK_BYTES)
    except OSError as e:
        raise CLIError(f"--corpus {path!r} cannot be read: {e.strerror or e}") from None
    if not head:
        raise CLIError(f"--corpus {path!r} is empty; give a text file of at least a few hundred kilobytes")
    if b"\0" in head:
        raise CLIError(f"--corpus {path!r} is binary (it has NUL bytes); the benchmark's language model needs "
                       "UTF-8 text")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < CORPUS_CHECK_BYTES)
    except UnicodeDecodeError as e:
        raise CLIError(f"--corpus {path!r} is not UTF-8 text (invalid byte at offset {e.start}); convert it, "
                       "e.g. iconv -t UTF-8") from None
    return path


def _results_file(path: str) -> str:
    """``extrapolate --out``: a file (created with its folder if needed), never a directory."""
    if os.path.isdir(path):
        raise CLIError(f"--out {path!r} is a directory; give a results file such as {os.path.join(path, 'results.jsonl')!r}")
    check_output_file("--out", path)
    _make_folder("--out", os.path.dirname(path) or ".")
    return path


def _make_folder(flag: str, path: str) -> str:
    """Creates ``path`` (and its parents) or says in one line why it cannot be."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CLIError(f"{flag} {path!r} is not a folder (a file is in the way)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CLIError(f"{flag}: cannot create folder {path!r}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CLIError(f"{flag}: folder {path!r} is not writable")
    return path


def _schemes(texts: list[str] | None, profile) -> list[str] | None:
    """``--scheme`` SPECs (or per-layer patterns: a JSON list of SPECs) parsed, bounded (sizes within
    ``posenc.limits``) and resolved for the profile's models (as the benchmark's plan resolves them)
    before any work or any file."""
    from posenc.extrapolate.model import layer_pattern
    from posenc.extrapolate.parts import plan
    from posenc.registry import check_limits
    from posenc.spec import as_spec

    for text in texts or ():
        try:
            pattern = layer_pattern(text)
            for item in [text] if pattern is None else pattern:
                check_limits(as_spec(item))
            plan(profile, [text], corpus_sha="", log=lambda message: None)
        except (ValueError, TypeError) as e:
            shown = text if len(text) < 60 else text[:57] + "..."
            raise CLIError(f"--scheme {shown!r}: {e}") from None
    return texts


def _run_kwargs(args: argparse.Namespace, profile, who: str) -> dict:
    """Every argument but ``--out``, checked (so that nothing is created for a run that cannot start).

    The arguments that need no extra come first, then the ``extrapolate`` extra (``require_extra``:
    one line naming it, rather than matplotlib's traceback from the benchmark's imports), then
    ``--scheme``, whose check plans the runs with the benchmark's own code."""
    threads, jobs = _positive("--threads", args.threads), _positive("--jobs", args.jobs) or "auto"
    ray = args.executor not in (None, "local")
    if ray and args.jobs is not None:
        raise CLIError(f"--jobs {args.jobs} runs worker processes on this machine; with --executor {args.executor} "
                       "the cluster's CPUs (or GPUs) decide how many runs go at once: leave --jobs out")
    if ray and not args.dry_run:
        try:
            import ray as _  # noqa: F401
        except ImportError:
            raise CLIError(f"--executor {args.executor} needs Ray: pip install 'posenc[cluster]'") from None
    if args.dry_run:
        return {"schemes": _schemes(args.schemes, profile), "threads": threads, "jobs": jobs, "device": args.device,
                "executor": args.executor}
    corpus = _corpus(args.corpus)
    needed = ("matplotlib",  # the figures; tqdm: the progress bars on a terminal; scikit-learn: the digits
              *(("tqdm",) if not args.no_progress and sys.stderr.isatty() else ()),
              *(("scikit-learn",) if "image" in profile.parts else ()))
    require_extra("extrapolate", who, only=needed)
    return {"schemes": _schemes(args.schemes, profile), "corpus": corpus, "threads": threads, "jobs": jobs,
            "device": args.device, "progress": not args.no_progress, "executor": args.executor}


def _dry_run(kwargs: dict, profile) -> int:
    """``--dry-run``: the plan's estimated cost, one line on stdout, nothing run or written."""
    from posenc.extrapolate.driver import estimate_plan

    print(estimate_plan(profile, **kwargs))
    return 0


def _check_context_parallel(method: str, profile, schemes: list[str] | None) -> None:
    """``--context-parallel`` needs torchrun with 2 processes or more, the benchmark's own decoder, and
    schemes the method runs (``posenc.extrapolate.context_parallel.check_runs`` on the plan), checked
    before any process group or file."""
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) < 2:
        raise CLIError(f"--context-parallel {method} splits each sequence over the processes of torchrun "
                       f"(WORLD_SIZE={world}): run it as torchrun --nproc-per-node 2 (or more) -m posenc "
                       "extrapolate ..., or leave the flag out")
    if profile.arch != "transformer":
        raise CLIError(f"--context-parallel {method} shards the benchmark's own decoder (--arch transformer), not "
                       f"--arch {profile.arch}; for a transformers model use posenc.interop.patch(model, pe, "
                       "context_parallel=...)")
    from posenc.extrapolate.context_parallel import check_runs
    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.plan import available_schemes

    quiet = lambda message: None  # noqa: E731
    names = list(schemes) if schemes else list(available_schemes(profile.schemes, quiet))
    check_runs(profile, plan(profile, names, corpus_sha="", log=quiet), method, int(world))


def cmd_extrapolate(args: argparse.Namespace) -> int:
    profile = _profile(args)
    kwargs = _run_kwargs(args, profile, "the benchmark")  # checked before --out's folder is created
    if args.dry_run:
        return _dry_run(kwargs, profile)
    from posenc.extrapolate.driver import run
    if args.context_parallel is not None:
        _check_context_parallel(args.context_parallel, profile, kwargs["schemes"])
    out = _results_file(args.out or f"extrapolate-{profile.name}.jsonl")
    records = run(profile, results=out, context_parallel=args.context_parallel, **kwargs)
    if records:
        print(f"{len(records)} results in {out}")
    return 0


def command_line(args: argparse.Namespace) -> str:
    """``posenc COMMAND`` with every option the user gave (a repeatable one repeated), as a shell
    line: what the page's header shows; the values in effect for the others are the page's to say."""
    import shlex

    from posenc.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    words = ["posenc", args.command]
    for action in sub.choices[args.command]._actions:
        flags = [f for f in action.option_strings if f.startswith("--")]
        if not flags or action.dest in ("help", "func") or not hasattr(args, action.dest):
            continue
        value = getattr(args, action.dest)
        if isinstance(action, argparse._StoreTrueAction):
            words += [flags[0]] if value else []
        elif isinstance(value, (list, tuple)):
            words += [w for item in value for w in (flags[0], str(item))]
        elif value is not None:
            words += [flags[0], str(value)]
    return shlex.join(words)


def cmd_report(args: argparse.Namespace) -> int:
    profile = _profile(args)
    kwargs = _run_kwargs(args, profile, "the report (its benchmark and figures)")  # checked before --out is made
    if args.dry_run:
        return _dry_run(kwargs, profile)
    from posenc.extrapolate.report import make_report
    path = make_report(profile, out=Path(_make_folder("--out", args.out)), run_benchmark=not args.no_run,
                       command=command_line(args), **kwargs)
    if path is not None:
        print(f"report written to {path}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("extrapolate", help="train short, test long: perplexity and task accuracy by length",
                       description="Trains a small decoder per scheme at one length and evaluates it at longer "
                                   "ones; results are appended to a JSONL file as each run finishes, and a "
                                   "second start with the same arguments resumes where the first stopped.")
    _common(p, default_profile="quick")
    p.add_argument("--out", metavar="FILE", default=None, help="results file (default: extrapolate-PROFILE.jsonl)")
    p.add_argument("--context-parallel", choices=CONTEXT_PARALLEL, default=None,
                   help="under torchrun (2 processes or more): each process trains on its shard of every sequence, "
                        "attention spanning them by a ring of key/value shards or by heads (ulysses), instead of "
                        "a slice of the batch (docs/guide/context_parallel.md)")
    p.set_defaults(func=cmd_extrapolate)

    r = sub.add_parser("report", help="run (or reuse) the benchmark and write the offline HTML report",
                       description="Runs the extrapolation benchmark (reusing finished results in "
                                   "OUT/results.jsonl) and the analysis, and writes OUT/index.html: figures "
                                   "embedded, nothing fetched from the network.")
    _common(r, default_profile="quick")
    r.add_argument("--out", metavar="DIR", default="report", help="output folder (default: report)")
    r.add_argument("--no-run", action="store_true", help="only render the results already in OUT/results.jsonl")
    r.set_defaults(func=cmd_report)
