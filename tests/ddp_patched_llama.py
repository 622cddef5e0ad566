"""Run under ``torchrun --nproc-per-node 2`` (gloo): for each posenc scheme of ``argv[1]`` (comma
separated), a tiny Llama patched with it, wrapped in DDP, each rank on its half of one batch; rank 0
saves the averaged gradients to ``argv[2]/SPEC.pt``. One launch serves every scheme (each process
start imports torch and transformers: seconds). ``model_and_batch`` is also what the test runs in
its own process on the whole batch, without DDP."""

import datetime
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

import posenc.interop


def model_and_batch(spec):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
    model = posenc.interop.patch(LlamaForCausalLM(config), spec)
    ids = torch.randint(3, 97, (4, 16), generator=torch.Generator().manual_seed(1))
    return model, ids


def whole_batch_gradients(spec):
    """One process, the whole batch, no DDP: the gradients the two ranks must average to."""
    model, ids = model_and_batch(spec)
    model(ids, labels=ids).loss.backward()
    return {k: p.grad for k, p in model.named_parameters() if p.grad is not None}


def main():
    specs, out = sys.argv[1].split(","), sys.argv[2]
    faulthandler.dump_traceback_later(150, exit=True)  # a hang prints where it is and fails, within the test's timeout
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    for spec in specs:
        model, ids = model_and_batch(spec)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        half = ids.shape[0] // world
        mine = ids[rank * half:(rank + 1) * half]
        ddp(mine, labels=mine).loss.backward()  # DDP averages the ranks' gradients
        if rank == 0:
            torch.save({k: p.grad for k, p in ddp.module.named_parameters() if p.grad is not None},
                       os.path.join(out, f"{spec}.pt"))
    dist.barrier()  # both ranks leave together
    # and leave without destructors: gloo's run-loop thread frees the barrier's work under the GIL, and
    # destroying the group (or the DDP reducer dropping its last reference at exit) joins that thread
    # while holding the GIL. Seen here: one rank in ~ProcessGroupGloo, its run loop in take_gil, forever.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
