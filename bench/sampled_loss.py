"""How often the Doctor's loss tolerance for another split refuses an honest split, replayed
offline on the micro-batch fixture (a script that prints one micro-batch's loss).

The fixture's own model and data (``tests/fixtures/microbatch-lm``), trained in this process at
each seed and split (the challenge seed Apply draws per round sets both); the drift as
``verify.loss_drift`` computes it, the tolerance as ``doctor.calibrate`` sets it from a
calibration run at one seed (the baseline's split against the first other one), applied to the
honest splits at every other seed, and to a broken split (the accumulation's division dropped:
gradients twice as large) that must be refused. Two rules: 3x the larger of the drift's one
draw and the worst step's drift (before), and 3x the larger of those and the drift's spread
(``verify.sampled_drift_sd``, now). No timing: seconds on two cores.

    .venv/bin/python bench/sampled_loss.py [--seeds 120]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from infrarsi.doctor.calibrate import LOSS_MULTIPLE
from infrarsi.verify import loss_drift, sampled_drift_sd

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "microbatch-lm"
LAST_K = 3
BASE, CALIBRATED, HONEST = 2, 1, (1, 4, 8)


def curve(seed: int, batch: int, broken: bool = False, iters: int = 8) -> list[float]:
    """The printed loss of each iteration of the fixture's training (``train.py``'s loop)."""
    sys.path.insert(0, str(FIXTURE))
    from model import BigramLM, configure_optimizer  # the fixture's own model

    vocab, block, accum = 64, 32, 8 // batch
    g = torch.Generator().manual_seed(seed)
    rows = iters * batch * accum
    start = torch.randint(0, vocab, (rows, 1), generator=g)
    steps = torch.randint(1, 4, (rows, block), generator=g)
    data = torch.cat([start, start + steps.cumsum(1)], 1) % vocab
    torch.manual_seed(seed)
    model = BigramLM(vocab)
    opt = configure_optimizer(model)
    divide = 1 if broken else accum
    out = []
    for it in range(iters):
        for micro in range(accum):
            row = (it * accum + micro) * batch
            loss = model(data[row : row + batch, :-1], data[row : row + batch, 1:]) / divide
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(round(loss.item() * divide, 4))
    return out


def refused(tolerances: list[float], curves: dict, against: str | int) -> float:
    """Share of (calibration seed, other seed) pairs whose candidate drifts past the tolerance."""
    hits = total = 0
    for i, tol in enumerate(tolerances, start=1):
        for seed, by_split in curves.items():
            if seed != i:
                hits += loss_drift(by_split[BASE], by_split[against], LAST_K)[0] > tol
                total += 1
    return hits / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=120)
    args = parser.parse_args()
    torch.set_num_threads(1)
    curves = {
        s: {**{b: curve(s, b) for b in (BASE, *HONEST)}, "broken": curve(s, 4, broken=True)}
        for s in range(1, args.seeds + 1)
    }
    rules = {"one draw (before)": [], "its spread (now)": []}
    for by_split in curves.values():
        ref, cal = by_split[BASE], by_split[CALIBRATED]
        draw = max(loss_drift(ref, cal, LAST_K))
        rules["one draw (before)"].append(LOSS_MULTIPLE * draw)
        rules["its spread (now)"].append(
            LOSS_MULTIPLE * max(draw, sampled_drift_sd(ref, cal, LAST_K))
        )
    for name, tols in rules.items():
        honest = ", ".join(f"batch {b} {refused(tols, curves, b):.1%}" for b in HONEST)
        print(
            f"{name}: median tolerance {statistics.median(tols):.3f}; honest splits refused: "
            f"{honest}; broken split caught: {refused(tols, curves, 'broken'):.1%}"
        )


if __name__ == "__main__":
    main()
