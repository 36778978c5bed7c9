"""Train the Mixture-of-Experts GPT of model.py with expert parallelism over two nodes.

Two nodes on one machine (two launchers meeting through c10d rendezvous on loopback):
  torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:29500 --rdzv-id demo train.py --expert-parallel 2 &
  torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:29500 --rdzv-id demo train.py --expert-parallel 2

With ``--expert-parallel`` equal to the world size each rank holds n_experts / world experts and
tokens reach their experts through all-to-all; with 1 every rank holds every expert. Replicated
parameters are averaged with one all-reduce per optimizer step. gloo on CPU, NCCL on GPU.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

from data import TokenStream
from infrarsi import probe
from model import GPT, GPTConfig


def full_params(model, rank, world, expert_parallel):
    """Every parameter on rank 0 (None elsewhere), sharded experts gathered from their ranks and
    numbered as in the unsharded model; a collective: all ranks call it."""
    params = {n: p.detach().cpu() for n, p in model.named_parameters()}
    if expert_parallel == 1:
        return params if rank == 0 else None
    experts = {f"blocks.{b}.moe.experts.{block.moe.first_expert + i}.{name}": p.detach().cpu()
               for b, block in enumerate(model.blocks)
               for i, expert in enumerate(block.moe.experts)
               for name, p in expert.named_parameters()}
    shards = [None] * world
    dist.all_gather_object(shards, experts)
    if rank != 0:
        return None
    full = {n: p for n, p in params.items() if ".moe.experts." not in n}
    for shard in shards:
        full.update(shard)
    return full


def flag(text):
    """argparse type for booleans written 0/1/true/false."""
    return text.lower() in ("1", "true", "yes", "on")


def sync_gradients(model, world, expert_parallel):
    """Average gradients as one big batch would: all-reduce replicated ones, rescale sharded ones.

    A sharded expert already received the gradient of every rank's tokens through all-to-all.
    """
    sharded = {id(p) for p in model.expert_parameters()} if expert_parallel > 1 else set()
    for p in model.parameters():
        if p.grad is None:
            continue
        if id(p) not in sharded:
            dist.all_reduce(p.grad)
        p.grad.div_(world)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
# model
parser.add_argument("--n-layer", type=int, default=2)
parser.add_argument("--n-head", type=int, default=4)
parser.add_argument("--n-embd", type=int, default=64)
parser.add_argument("--vocab-size", type=int, default=512)
parser.add_argument("--seq-len", type=int, default=64)
parser.add_argument("--n-experts", type=int, default=4)
parser.add_argument("--expert-hidden", type=int, default=128)
# workload (fixed by the task: changing these changes what is computed)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--global-batch", type=int, default=8, help="sequences per optimizer step")
parser.add_argument("--seed", type=int, default=1234)
parser.add_argument("--lr", type=float, default=1e-3)
# how the batch is split
parser.add_argument("--micro-batch", type=int, default=4, help="sequences per forward pass")
parser.add_argument("--grad-accum", type=int, default=0, help="micro-steps per step; 0 = derive")
# execution knobs
parser.add_argument("--expert-parallel", type=int, default=0, help="0 = the world size")
parser.add_argument("--a2a-chunks", type=int, default=1, help="all-to-all rounds per layer")
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="autocast")
parser.add_argument("--activation-checkpointing", type=flag, default=False)
parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = launcher default")
parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
args = parser.parse_args()

# -----------------------------------------------------------------------------
# distributed setup
if args.threads > 0:
    torch.set_num_threads(args.threads)
use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
world = int(os.environ["WORLD_SIZE"])
device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
if use_cuda:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if use_cuda else "gloo")
expert_parallel = args.expert_parallel or world
assert expert_parallel in (1, world), "experts are replicated (1) or sharded over all ranks"
assert args.n_experts % expert_parallel == 0, "experts must split evenly over ranks"

per_rank = args.global_batch // world
grad_accum = args.grad_accum or per_rank // args.micro_batch
assert args.micro_batch * grad_accum * world == args.global_batch, (
    f"micro_batch {args.micro_batch} x grad_accum {grad_accum} x world {world}"
    f" != global_batch {args.global_batch}")

# -----------------------------------------------------------------------------
# model, optimizer, data
torch.manual_seed(args.seed)
config = GPTConfig(vocab_size=args.vocab_size, block_size=args.seq_len, n_layer=args.n_layer,
                   n_head=args.n_head, n_embd=args.n_embd, n_experts=args.n_experts,
                   expert_hidden=args.expert_hidden, ep_size=expert_parallel,
                   ep_rank=rank if expert_parallel > 1 else 0, a2a_chunks=args.a2a_chunks,
                   activation_checkpointing=args.activation_checkpointing)
model = GPT(config).to(device)
initial = full_params(model, rank, world, expert_parallel)
if rank == 0:
    probe.save_weights("initial", initial)
optimizer = model.configure_optimizers(args.lr, weight_decay=0.1, betas=(0.9, 0.95))
stream = TokenStream(args.seed, args.vocab_size, args.seq_len)
autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
tokens_per_step = args.global_batch * args.seq_len

# -----------------------------------------------------------------------------
# training loop
metrics = probe.Probe(device=device)
t_start = time.time()
for step in range(args.steps):
    with metrics.step(tokens=tokens_per_step) as s:
        step_loss = 0.0
        for micro_step in range(grad_accum):
            with s.phase("data"):
                idx = stream.micro_batch_indices(step, args.global_batch, rank, world,
                                                 micro_step, args.micro_batch)
                x, y = (t.to(device) for t in stream.batch(idx))
            with s.phase("forward"), autocast:
                loss = model(x, y) / grad_accum
            with s.phase("backward"):
                loss.backward()
            step_loss += loss.item()
        with s.phase("comm"):
            sync_gradients(model, world, expert_parallel)
        with s.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        s.loss = step_loss
    if rank == 0:
        print(f"step {step} loss {step_loss:.4f}", flush=True)
metrics.close()
final = full_params(model, rank, world, expert_parallel)
if rank == 0:
    probe.save_weights("final", final)
if rank == 0:
    print(f"done {args.steps} steps in {time.time() - t_start:.2f}s", flush=True)
dist.destroy_process_group()
