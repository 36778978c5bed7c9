"""How the model is sharded: FSDP2 (``fully_shard``) over all ranks of all nodes.

``wrap="block"`` shards each transformer block as its own unit (its parameters are gathered
just before it runs and freed after); ``wrap="model"`` shards the whole model as one unit.
``reshard_after_forward`` frees gathered parameters after forward and gathers them again in
backward (less memory, more communication). ``param_dtype`` is the mixed-precision policy.
"""

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def shard_model(model, mesh, wrap="block", reshard_after_forward=True, param_dtype="fp32"):
    """Apply FSDP2 to ``model`` in place and return it."""
    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if param_dtype == "bf16" else torch.float32,
        reduce_dtype=torch.float32)
    options = dict(mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    if wrap == "block":
        for block in model.blocks:
            fully_shard(block, **options)
    fully_shard(model, **options)
    return model
