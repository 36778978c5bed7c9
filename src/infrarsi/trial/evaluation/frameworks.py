"""The reference code's judgement of parameters a framework's script trained, where the script
has no evaluation command of its own: a Hugging Face ``Trainer`` job is run as its author runs
it, unpatched, with ``Trainer.train`` replaced by the Trainer's own evaluation of each saved set
of parameters on the job's held-out set — the script builds the model and the data exactly as
the trial did, and no code a patch wrote runs. A PyTorch Lightning job is run the same way with
``Trainer.fit`` replaced by ``Trainer.validate`` on the validation loader the script gives it
(one process: the script's ``devices``/``num_nodes``/``strategy`` set aside)."""

from __future__ import annotations

from pathlib import Path

TRAINER_SCRIPT = "trainer_evaluation.py"
LIGHTNING_SCRIPT = "lightning_evaluation.py"

# Each runs in a fork of the evaluation server, in an unpatched copy of the workload:
#   python trainer_evaluation.py FINAL INITIAL SCRIPT ARGS...   (INITIAL may be "")
# and prints one JSON line: eval_loss, initial_eval_loss, layout_problems.
_LOAD = r'''
import json, os, runpy, sys

final, initial, script, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]


def _load(model, path):
    """Copy the saved parameters into ``model``; the layout's problems, if any. A saved name
    that is not the model's own is matched by the one own name it ends (the observer names a
    parameter by the innermost module that holds them all: a LightningModule's inner model)."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    own = dict(model.named_parameters())
    for name in [n for n in state if n not in own]:
        ends = [o for o in own if o.endswith("." + name) and o not in state]
        if len(ends) == 1:
            state[ends[0]] = state.pop(name)
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


def _report(out):
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)
'''

_TRAINER = r"""
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
    _report(out)


from transformers import trainer as _trainer  # noqa: E402

_trainer.Trainer.train = evaluate_instead
ENTRY = "Trainer.train"
"""

_LIGHTNING = r"""
def _held_out_loss(logged):
    # the one logged figure named a loss (or the only figure) of the first validation loader
    metrics = logged[0] if logged else {}
    losses = [k for k in metrics if "loss" in k.lower()] or list(metrics)
    if len(losses) != 1:
        raise SystemExit(
            "the script's validation logs no single loss (self.log('val_loss', ...) in "
            f"validation_step): it logged {sorted(metrics)}"
        )
    return float(metrics[losses[0]])


def validate_instead(self, model, train_dataloaders=None, val_dataloaders=None,
                     datamodule=None, **unused_kw):
    out, problems = {"held_out": True}, []
    for key, path in (("eval_loss", final), ("initial_eval_loss", initial)):
        if not path:
            continue
        problems += _load(model, path)
        if problems:
            break
        logged = self.validate(model, dataloaders=val_dataloaders, datamodule=datamodule,
                               verbose=False)
        out[key] = _held_out_loss(logged)
    out["layout_problems"] = problems
    _report(out)


def _one_process(init):
    def one(self, *args, **kw):
        kw.update(devices=1, num_nodes=1, strategy="auto", logger=False,
                  enable_progress_bar=False, enable_checkpointing=False)
        init(self, *args, **kw)
    return one


for _package in ("lightning.pytorch", "pytorch_lightning"):
    try:
        _module = __import__(_package, fromlist=["Trainer"])
    except ImportError:
        continue
    _module.Trainer.fit = validate_instead
    _module.Trainer.__init__ = _one_process(_module.Trainer.__init__)
ENTRY = "Trainer.fit"
"""

_RUN = r"""
sys.argv = [script, *args]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
sys.stderr.write(f"the script ended without calling {ENTRY}: nothing was evaluated\n")
sys.exit(3)
"""

SCRIPTS = {"trainer": (TRAINER_SCRIPT, _TRAINER), "lightning": (LIGHTNING_SCRIPT, _LIGHTNING)}


def framework_command(
    framework: str, root: Path, command: list[str], final: str, initial: str
) -> list[str]:
    """``python <framework>_evaluation.py FINAL INITIAL SCRIPT ARGS`` for the workload's own
    ``command`` (``python SCRIPT ARGS``), the evaluation script written into ``root``."""
    if len(command) < 2 or not command[1].endswith(".py"):
        raise ValueError(
            f"evaluation.command: a {framework} job's evaluation is its script's own command "
            f"(python train.py ...); got {command[:2]}"
        )
    name, body = SCRIPTS[framework]
    path = Path(root) / name
    path.write_text(_LOAD + body + _RUN)
    return ["python", str(path), final, initial, *command[1:]]
