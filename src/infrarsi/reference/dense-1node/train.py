"""Train the GPT of model.py with DistributedDataParallel on the token stream of data.py.

Plain:      python train.py --steps 10
Under DDP:  torchrun --standalone --nproc-per-node 2 train.py --micro-batch 2

The global batch (sequences per optimizer step) is fixed; ``--grad-accum`` splits each rank's
share of it into micro-batches. Gradients are averaged exactly as one big batch would average
them, so every split of the same global batch trains the same model. gloo on CPU, NCCL on GPU.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from data import TokenStream
from infrarsi import probe
from model import GPT, GPTConfig


def full_params(model):
    """Every parameter, unwrapped from DDP and torch.compile, for the harness to check."""
    raw = getattr(model, "module", model)
    raw = getattr(raw, "_orig_mod", raw)
    return dict(raw.named_parameters())


def flag(text):
    """argparse type for booleans written 0/1/true/false."""
    return text.lower() in ("1", "true", "yes", "on")


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
# model
parser.add_argument("--n-layer", type=int, default=2)
parser.add_argument("--n-head", type=int, default=4)
parser.add_argument("--n-embd", type=int, default=64)
parser.add_argument("--vocab-size", type=int, default=512)
parser.add_argument("--seq-len", type=int, default=64)
# workload (fixed by the task: changing these changes what is computed)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--global-batch", type=int, default=8, help="sequences per optimizer step")
parser.add_argument("--seed", type=int, default=1234)
parser.add_argument("--lr", type=float, default=1e-3)
# how the batch is split
parser.add_argument("--micro-batch", type=int, default=4, help="sequences per forward pass")
parser.add_argument("--grad-accum", type=int, default=0, help="micro-steps per step; 0 = derive")
# execution knobs
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
parser.add_argument("--activation-checkpointing", type=flag, default=False)
parser.add_argument("--compile", choices=["off", "default", "max-autotune-no-cudagraphs"],
                    default="off")
parser.add_argument("--ddp-bucket-mb", type=float, default=25.0)
parser.add_argument("--gradient-as-bucket-view", type=flag, default=False)
parser.add_argument("--accum-no-sync", type=flag, default=False,
                    help="all-reduce only on the last micro-step of each step")
parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = launcher default")
parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
args = parser.parse_args()

# -----------------------------------------------------------------------------
# distributed setup
if args.threads > 0:
    torch.set_num_threads(args.threads)
use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
distributed = "RANK" in os.environ
rank = int(os.environ.get("RANK", 0))
local_rank = int(os.environ.get("LOCAL_RANK", 0))
world = int(os.environ.get("WORLD_SIZE", 1))
device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
if use_cuda:
    torch.cuda.set_device(device)
if distributed:
    dist.init_process_group("nccl" if use_cuda else "gloo")

per_rank = args.global_batch // world
grad_accum = args.grad_accum or per_rank // args.micro_batch
assert args.micro_batch * grad_accum * world == args.global_batch, (
    f"micro_batch {args.micro_batch} x grad_accum {grad_accum} x world {world}"
    f" != global_batch {args.global_batch}")

# -----------------------------------------------------------------------------
# model, optimizer, data
torch.manual_seed(args.seed)
config = GPTConfig(vocab_size=args.vocab_size, block_size=args.seq_len, n_layer=args.n_layer,
                   n_head=args.n_head, n_embd=args.n_embd,
                   activation_checkpointing=args.activation_checkpointing)
model = GPT(config).to(device)
if rank == 0:
    probe.save_weights("initial", full_params(model))
optimizer = model.configure_optimizers(args.lr, weight_decay=0.1, betas=(0.9, 0.95))
if args.compile != "off":
    model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
if distributed:
    model = DDP(model, device_ids=[local_rank] if use_cuda else None,
                bucket_cap_mb=args.ddp_bucket_mb,
                gradient_as_bucket_view=args.gradient_as_bucket_view)
stream = TokenStream(args.seed, args.vocab_size, args.seq_len)
autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
tokens_per_step = args.global_batch * args.seq_len

# -----------------------------------------------------------------------------
# training loop
metrics = probe.Probe(device=device)
metrics.watch_comm(model)
t_start = time.time()
for step in range(args.steps):
    with metrics.step(tokens=tokens_per_step) as s:
        step_loss = 0.0
        for micro_step in range(grad_accum):
            with s.phase("data"):
                idx = stream.micro_batch_indices(step, args.global_batch, rank, world,
                                                 micro_step, args.micro_batch)
                x, y = (t.to(device) for t in stream.batch(idx))
            last = micro_step == grad_accum - 1
            skip_sync = distributed and args.accum_no_sync and not last
            with model.no_sync() if skip_sync else contextlib.nullcontext():
                with s.phase("forward"), autocast:
                    loss = model(x, y) / grad_accum
                with s.phase("backward"):
                    loss.backward()
            step_loss += loss.item()
        with s.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        s.loss = step_loss
    if rank == 0:
        print(f"step {step} loss {step_loss:.4f}", flush=True)
metrics.close()
if rank == 0:
    probe.save_weights("final", full_params(model))
if rank == 0:
    print(f"done {args.steps} steps in {time.time() - t_start:.2f}s", flush=True)
if distributed:
    dist.destroy_process_group()
