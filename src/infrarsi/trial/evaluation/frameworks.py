"""The reference code's judgement of parameters a framework's script trained, where the script
has no evaluation command of its own: a Hugging Face ``Trainer`` job is run as its author runs
it, unpatched, with ``Trainer.train`` replaced by the Trainer's own evaluation of each saved set
of parameters on the job's held-out set — the script builds the model and the data exactly as
the trial did, and no code a patch wrote runs."""

from __future__ import annotations

from pathlib import Path

TRAINER_SCRIPT = "trainer_evaluation.py"

# Runs in a fork of the evaluation server, in an unpatched copy of the workload:
#   python trainer_evaluation.py FINAL INITIAL SCRIPT ARGS...   (INITIAL may be "")
# prints one JSON line: eval_loss, initial_eval_loss, layout_problems.
_TRAINER = r"""
import json, os, runpy, sys

final, initial, script, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def _load(model, path):
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    own = dict(model.named_parameters())
    problems = [f"{n}: not a parameter of the model" for n in sorted(set(state) - set(own))]
    problems += [f"{n}: not saved" for n in sorted(set(own) - set(state))]
    problems += [
        f"{n}: shape {tuple(state[n].shape)}, the model's {tuple(own[n].shape)}"
        for n in sorted(set(state) & set(own))
        if state[n].shape != own[n].shape
    ]
    if not problems:
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(state[n].to(p.dtype))
    return problems


def evaluate_instead(self, *unused, **unused_kw):
    held_out = self.eval_dataset if self.eval_dataset is not None else self.train_dataset
    out, problems = {"held_out": self.eval_dataset is not None}, []
    for key, path in (("eval_loss", final), ("initial_eval_loss", initial)):
        if not path:
            continue
        problems += _load(self.model, path)
        if problems:
            break
        out[key] = float(self.evaluate(eval_dataset=held_out)["eval_loss"])
    out["layout_problems"] = problems
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)


from transformers import trainer as _trainer  # noqa: E402

_trainer.Trainer.train = evaluate_instead
sys.argv = [script, *args]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
sys.stderr.write("the script ended without calling Trainer.train: nothing was evaluated\n")
sys.exit(3)
"""


def trainer_command(root: Path, command: list[str], final: str, initial: str) -> list[str]:
    """``python trainer_evaluation.py FINAL INITIAL SCRIPT ARGS`` for the workload's own
    ``command`` (``python SCRIPT ARGS``), the evaluation script written into ``root``."""
    if len(command) < 2 or not command[1].endswith(".py"):
        raise ValueError(
            "evaluation.command: a Trainer job's evaluation is its script's own command "
            f"(python train.py ...); got {command[:2]}"
        )
    path = Path(root) / TRAINER_SCRIPT
    path.write_text(_TRAINER)
    return ["python", str(path), final, initial, *command[1:]]
