"""``posenc data``: the benchmark's train/held-out split of a profile, and its contamination."""

from __future__ import annotations

import argparse
import json


def cmd_data(args: argparse.Namespace) -> int:
    from posenc.commands.extrapolate import _corpus
    from posenc.extrapolate.data import load_corpus, split
    from posenc.extrapolate.profiles import get_profile

    profile = get_profile(args.profile)
    lm = profile.lm
    corpus = load_corpus(_corpus(args.corpus), max_bytes=lm.corpus_bytes, seed=lm.data_seed)  # checked as extrapolate does
    info = split(corpus, heldout_tokens=lm.heldout_tokens, lengths=lm.lengths()).info or {}
    out = {"profile": profile.name, "sha256": corpus.sha256, **info}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    names = info["heldout_names"]
    shown = ", ".join(names[:6]) + (f", … ({len(names)} in all)" if len(names) > 6 else "")
    goal = "meets" if info["overlap_128"] <= 0.01 else "MISSES"
    print(f"profile {profile.name}: {info['source']} (sha256 {corpus.sha256[:12]}…), seed {lm.data_seed}\n"
          f"  training   {info['documents_train']:>5} documents {info['bytes_train']:>10,} bytes\n"
          f"  held out   {info['documents_heldout']:>5} documents {info['bytes_heldout']:>10,} bytes: {shown}\n"
          f"  dropped    {info['dropped_exact']} exact and {info['dropped_near']} near copies\n"
          f"  overlap_32  {info['overlap_32']:.4f}  (share of held-out 32-byte strings found in training)\n"
          f"  overlap_128 {info['overlap_128']:.4f}  ({goal} the goal <= 0.01)")
    return 0


def add_commands(sub) -> None:
    from posenc.commands.extrapolate import PROFILE_NAMES

    p = sub.add_parser("data", help="the benchmark's train/held-out split and its contamination",
                       description="Draws the language-modelling corpus of a profile as the benchmark does "
                                   "(whole documents in a seeded order, exact and near copies dropped) and "
                                   "prints both sides of the split: documents, bytes, and the share of "
                                   "held-out 32- and 128-byte strings that occur in the training text.")
    p.add_argument("--profile", choices=PROFILE_NAMES, default="quick", help="default quick")
    p.add_argument("--corpus", metavar="FILE", default=None,
                   help="a text file (default: the Python standard library's sources)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_data)
