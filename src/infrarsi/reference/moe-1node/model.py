"""A minGPT-style transformer whose MLPs are Mixture-of-Experts layers, written plainly.

Attention as in the dense model (separate key/query/value projections, materialised causal
mask). Each block's MLP is a set of experts; the locked ``routing.py`` picks two per token, and
this file dispatches tokens to them the common way: a loop over experts with boolean masks.
With ``ep_size > 1`` each rank keeps only its share of the experts and tokens travel to their
expert's rank and back with all-to-all, in ``a2a_chunks`` rounds. The loss adds the routers'
load-balancing loss.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.nn.functional import all_to_all_single
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from routing import AUX_LOSS_WEIGHT, Router


@dataclass
class GPTConfig:
    """Shape of the model; experts are split over ``ep_size`` ranks (this one is ``ep_rank``)."""
    vocab_size: int = 512
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    n_experts: int = 4
    expert_hidden: int = 128
    ep_size: int = 1
    ep_rank: int = 0
    a2a_chunks: int = 1
    activation_checkpointing: bool = False


class CausalSelfAttention(nn.Module):
    """Multi-head masked self-attention, one projection each for key, query and value."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head

    def forward(self, x):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # causal attention: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T) -> (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Expert(nn.Module):
    """One expert: a feed-forward network with GELU."""

    def __init__(self, n_embd, hidden):
        super().__init__()
        self.fc = nn.Linear(n_embd, hidden)
        self.proj = nn.Linear(hidden, n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class MoE(nn.Module):
    """Routes each token to its experts and sums their outputs, weighted by the router."""

    def __init__(self, config):
        super().__init__()
        self.router = Router(config.n_embd, config.n_experts)
        self.experts = nn.ModuleList(
            [Expert(config.n_embd, config.expert_hidden) for _ in range(config.n_experts)])
        self.ep_size, self.ep_rank = config.ep_size, config.ep_rank
        self.a2a_chunks = config.a2a_chunks
        self.first_expert = 0

    def keep_local_experts(self):
        """Drop the experts other ranks own (called once, after initialisation)."""
        per_rank = len(self.experts) // self.ep_size
        self.first_expert = self.ep_rank * per_rank
        self.experts = self.experts[self.first_expert:self.first_expert + per_rank]

    def forward(self, x):
        B, T, C = x.size()
        flat = x.view(-1, C)
        weights, experts, aux = self.router(flat)
        if self.ep_size > 1:
            parts = zip(flat.chunk(self.a2a_chunks), weights.chunk(self.a2a_chunks),
                        experts.chunk(self.a2a_chunks))
            out = torch.cat([self._dispatch_all_to_all(*part) for part in parts])
        else:
            out = self._run_experts(flat, weights, experts)
        return out.view(B, T, C), aux

    def _run_experts(self, x, weights, experts):
        """Each local expert on the tokens routed to it, weighted; a loop with boolean masks."""
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            mask = experts == self.first_expert + i
            rows = mask.any(dim=-1)
            w = (weights * mask).sum(dim=-1, keepdim=True)[rows]
            out[rows] += w * expert(x[rows])
        return out

    def _dispatch_all_to_all(self, x, weights, experts):
        """Send each (token, expert) pair to the expert's rank, run it there, send it back."""
        per_rank = len(self.experts)
        owner = experts.reshape(-1) // per_rank
        order = torch.argsort(owner, stable=True)
        token = torch.arange(x.size(0), device=x.device).repeat_interleave(experts.size(1))[order]
        send_counts = torch.bincount(owner, minlength=self.ep_size)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        send, recv = send_counts.tolist(), recv_counts.tolist()
        tokens_in = all_to_all_single(x.new_empty(sum(recv), x.size(1)), x[token], recv, send)
        ids_in = experts.new_empty(sum(recv))
        dist.all_to_all_single(ids_in, experts.reshape(-1)[order], recv, send)
        ones = torch.ones(sum(recv), 1, dtype=x.dtype, device=x.device)
        y = self._run_experts(tokens_in, ones, ids_in.unsqueeze(-1))
        y_back = all_to_all_single(x.new_empty(len(token), x.size(1)), y, send, recv)
        w = weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add(0, token, w * y_back)


class Block(nn.Module):
    """A pre-norm transformer block: attention then experts, each with a residual connection."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.moe = MoE(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        y, aux = self.moe(self.ln_2(x))
        return x + y, aux


class GPT(nn.Module):
    """The language model: embeddings, MoE blocks, final norm, tied LM head, balancing loss."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        for block in self.blocks:
            block.moe.keep_local_experts()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        """Mean next-token cross-entropy of ``idx`` against ``targets``, plus the balancing loss."""
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        aux_total = 0.0
        for block in self.blocks:
            if self.config.activation_checkpointing and self.training:
                x, aux = checkpoint(block, x, use_reentrant=False)
            else:
                x, aux = block(x)
            aux_total = aux_total + aux
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return loss + AUX_LOSS_WEIGHT * aux_total

    def expert_parameters(self):
        """Parameters of the experts this rank holds (sharded when ``ep_size > 1``)."""
        return [p for block in self.blocks for p in block.moe.experts.parameters()]

    def configure_optimizers(self, learning_rate, weight_decay, betas):
        """AdamW with weight decay on matrices only, PyTorch's default implementation."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)
