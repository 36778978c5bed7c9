"""Token routing for the Mixture-of-Experts layers: part of the workload, so it is locked.

Top-2 routing over a softmax of the router logits, the two weights renormalised to sum to one,
no capacity limit (dropless: every token reaches both of its experts), and the Switch-style
load-balancing loss ``n_experts * sum_e f_e * P_e`` added to the language-model loss with
weight ``AUX_LOSS_WEIGHT``. Which tokens go to which expert is decided here and nowhere else.
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

TOP_K = 2
AUX_LOSS_WEIGHT = 0.01


class Router(nn.Module):
    """Chooses ``TOP_K`` experts per token and returns their weights and the balancing loss."""

    def __init__(self, n_embd, n_experts):
        super().__init__()
        self.gate = nn.Linear(n_embd, n_experts, bias=False)
        self.n_experts = n_experts

    def forward(self, x):
        """x: (tokens, n_embd) -> weights (tokens, k), experts (tokens, k), aux loss (scalar)."""
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, TOP_K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        chosen = F.one_hot(experts, self.n_experts).sum(dim=1).float()
        fraction = chosen.mean(dim=0) / TOP_K
        aux = self.n_experts * (fraction * probs.mean(dim=0)).sum()
        return weights.to(x.dtype), experts, aux
