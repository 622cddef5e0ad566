"""A tiny Llama trained with each rank holding its shard of every sequence (context parallelism).

    torchrun --nproc-per-node 4 docs/context_parallel_llama.py --scheme alibi --method ring
    torchrun --nproc-per-node 4 docs/context_parallel_llama.py --scheme fox:gate=full --method ulysses

Every rank draws the same batch of random token sequences (a stand-in for a corpus), keeps the
tokens at ``posenc.shard_positions(L, world, rank)`` and calls the patched model on them with those
positions; ``patch(..., context_parallel=method)`` makes every attention layer span the whole
sequence across the ranks. The loss of a rank is the summed next-token loss of its tokens divided
by the tokens of the whole batch, and the gradients are all-reduced with a sum, so each step equals
one process's step on the whole sequences (``tests/test_context_parallel_patch.py`` checks the
gradients to float64 rounding). Rank 0 prints the loss of each step (the sum over the ranks).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    import transformers

    import posenc
    import posenc.interop

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scheme", default="alibi", help="a posenc SPEC (alibi, fox:gate=full, rope, t5, ...)")
    p.add_argument("--method", default="ring", choices=("allgather", "ring", "ulysses"))
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=args.length)
    torch.manual_seed(0)  # the same initial model on every rank
    model = posenc.interop.patch(transformers.AutoModelForCausalLM.from_config(config), args.scheme,
                                 context_parallel=args.method)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    positions = posenc.shard_positions(args.length, world, rank)  # this rank's tokens
    keep = positions < args.length - 1  # the last token has no next token
    data = torch.Generator().manual_seed(1)  # the same batches on every rank
    for step in range(args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch, args.length), generator=data)
        logits = model(input_ids=ids[:, positions], position_ids=positions[None]).logits  # (B, Ll, V)
        loss = torch.nn.functional.cross_entropy(logits[:, keep].flatten(0, 1),
                                                 ids[:, positions[keep] + 1].flatten(), reduction="sum")
        loss = loss / (args.batch * (args.length - 1))
        optimizer.zero_grad()
        loss.backward()
        for parameter in model.parameters():  # the ranks' parts of one gradient
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step}: loss {float(total):.4f} ({args.scheme}, {args.method}, {world} ranks)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
