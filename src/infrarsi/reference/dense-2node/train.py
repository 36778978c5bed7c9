"""Train the GPT of model.py sharded with FSDP2 over several nodes, on the token stream of data.py.

Two nodes on one machine (two launchers meeting through c10d rendezvous on loopback):
  torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:29500 --rdzv-id demo train.py &
  torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:29500 --rdzv-id demo train.py

The global batch (sequences per optimizer step) is fixed and split over every rank of every node;
gradients are reduce-scattered and averaged as one big batch would average them. gloo on CPU,
NCCL on GPU. Sharding lives in parallel.py.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh

from data import TokenStream
from infrarsi import probe
from model import GPT, GPTConfig
from parallel import shard_model


def full_params(model, rank):
    """Every parameter, unsharded, on rank 0 (None elsewhere); a collective: all ranks call it."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    names = {name for name, _ in model.named_parameters()}
    return {k: v for k, v in state.items() if k in names} if rank == 0 else None


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
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="autocast")
parser.add_argument("--activation-checkpointing", type=flag, default=False)
parser.add_argument("--fsdp-wrap", choices=["block", "model"], default="block")
parser.add_argument("--reshard-after-forward", type=flag, default=True)
parser.add_argument("--fsdp-param-dtype", choices=["fp32", "bf16"], default="fp32")
parser.add_argument("--accum-no-sync", type=flag, default=False,
                    help="reduce-scatter gradients only on the last micro-step of each step")
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
mesh = init_device_mesh(device.type, (world,))

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
model = shard_model(model, mesh, wrap=args.fsdp_wrap,
                    reshard_after_forward=args.reshard_after_forward,
                    param_dtype=args.fsdp_param_dtype)
initial = full_params(model, rank)
if rank == 0:
    probe.save_weights("initial", initial)
optimizer = model.configure_optimizers(args.lr, weight_decay=0.1, betas=(0.9, 0.95))
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
            model.set_requires_gradient_sync(last or not args.accum_no_sync)
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
final = full_params(model, rank)
if rank == 0:
    probe.save_weights("final", final)
if rank == 0:
    print(f"done {args.steps} steps in {time.time() - t_start:.2f}s", flush=True)
dist.destroy_process_group()
