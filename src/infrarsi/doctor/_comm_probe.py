"""Measure the backend's all-reduce and all-to-all bandwidth; run under torchrun by the doctor.

torchrun --standalone --nproc-per-node 2 _comm_probe.py   ->  one JSON line from rank 0
Bus bandwidth follows the usual convention: all-reduce moves 2(n-1)/n of the buffer per rank,
all-to-all (n-1)/n.
"""

import json
import time

import torch
import torch.distributed as dist

MEGABYTES, REPEATS = 16, 5

use_cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if use_cuda else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device(f"cuda:{rank % max(1, torch.cuda.device_count())}" if use_cuda else "cpu")
if use_cuda:
    torch.cuda.set_device(device)
buffer = torch.ones(MEGABYTES * 2**20 // 4, device=device)
out = torch.empty_like(buffer)


def best_seconds(op):
    best = float("inf")
    for i in range(REPEATS + 1):
        dist.barrier()
        t0 = time.perf_counter()
        op()
        if use_cuda:
            torch.cuda.synchronize()
        if i:
            best = min(best, time.perf_counter() - t0)
    return best


size = buffer.numel() * 4
allreduce_s = best_seconds(lambda: dist.all_reduce(buffer))
alltoall_s = best_seconds(lambda: dist.all_to_all_single(out, buffer))
if rank == 0:
    print(
        json.dumps(
            {
                "backend": dist.get_backend(),
                "ranks": world,
                "buffer_bytes": size,
                "allreduce_bus_bytes_per_s": 2 * (world - 1) / world * size / allreduce_s,
                "alltoall_bus_bytes_per_s": (world - 1) / world * size / alltoall_s,
            }
        )
    )
dist.destroy_process_group()
