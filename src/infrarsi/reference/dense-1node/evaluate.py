"""Evaluate saved parameters with this workload's own (reference) model code on held-out text.

python evaluate.py --weights final.pt [--initial initial.pt] --n-layer 2 ... --steps 8

Run by the harness in an unpatched copy of the workload: whatever a patch changed, the numbers
here come from the reference model. The held-out batch is the sequences right after the last
one training used, which no step ever saw. Prints one JSON line: the eval loss of each file,
any parameter the reference model lacks, misses or shapes differently (a tied parameter is
known by any of its names: ``aliases``, name -> the reference's own), and the parameters
whose gradient on the held-out batch is zero at both the initial and the final parameters
(``inert_params``: the loss does not depend on them, e.g. an attention key bias, which softmax
cancels; moving them or not changes nothing the model computes).
"""

import argparse
import dataclasses
import json

import torch

from data import TokenStream
from model import GPT, GPTConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--weights", required=True)
parser.add_argument("--initial", default="")
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--global-batch", type=int, required=True)
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--eval-seqs", type=int, default=16)
for name in ("n-layer", "n-head", "n-embd", "vocab-size", "seq-len", "n-experts",
             "expert-hidden"):
    parser.add_argument(f"--{name}", type=int)
args = parser.parse_args()

given = {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
         "vocab_size": args.vocab_size, "block_size": args.seq_len,
         "n_experts": args.n_experts, "expert_hidden": args.expert_hidden}
fields = {f.name for f in dataclasses.fields(GPTConfig)}
config = GPTConfig(**{k: v for k, v in given.items() if k in fields and v is not None})
stream = TokenStream(args.seed, args.vocab_size, args.seq_len)
first = args.steps * args.global_batch
x, y = stream.batch(list(range(first, first + args.eval_seqs)))


INERT_SHARE = 1e-5  # a gradient below this share of the median parameter's is rounding


def aliases(model):
    """Each name a parameter of the reference model goes by (a tied one has several) -> the
    name ``named_parameters()`` gives it: a parameter is known by the model's structure, not
    by the name a patch's registration order happened to give it."""
    first = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        first.setdefault(id(param), name)
    return {name: first[id(param)] for name, param in model.named_parameters(remove_duplicate=False)}


def evaluate(path):
    """Eval loss of the parameters in ``path``, how they differ from the reference model, and
    the parameters whose gradient there is zero."""
    torch.manual_seed(0)
    model = GPT(config)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    saved = {ALIASES.get(name, name): tensor for name, tensor in saved.items()}
    own = dict(model.named_parameters())
    problems = [f"missing {n}" for n in own if n not in saved]
    problems += [f"unexpected {n}" for n in saved if n not in own]
    problems += [f"shape of {n}: {tuple(saved[n].shape)} vs {tuple(p.shape)}"
                 for n, p in own.items() if n in saved and saved[n].shape != p.shape]
    if problems:
        return None, problems, set()
    with torch.no_grad():
        for name, param in own.items():
            param.copy_(saved[name].to(param.dtype))
    model.eval()
    loss = model(x, y)
    loss.backward()
    rms = {n: float(p.grad.double().pow(2).mean().sqrt()) if p.grad is not None else 0.0
           for n, p in own.items()}
    typical = sorted(rms.values())[len(rms) // 2]
    return float(loss.detach()), [], {n for n, g in rms.items() if g <= INERT_SHARE * typical}


torch.manual_seed(0)
ALIASES = aliases(GPT(config))
final_loss, problems, inert = evaluate(args.weights)
initial_loss, _, inert_initial = evaluate(args.initial) if args.initial else (None, [], inert)
print(json.dumps({"eval_loss": final_loss, "initial_eval_loss": initial_loss,
                  "layout_problems": problems,
                  "inert_params": sorted(inert & inert_initial),
                  "aliases": {n: c for n, c in ALIASES.items() if n != c}}))
