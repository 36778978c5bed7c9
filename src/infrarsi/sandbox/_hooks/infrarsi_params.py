"""The harness's own saving of a trial's parameters, for a script written on a framework that
saves none the harness can read (a Hugging Face ``Trainer`` job, an ``accelerate`` loop).

Standard library only at import; installed by the bootstrap hook in each rank when the harness
sets ``INFRARSI_SAVE_PARAMS`` (``trainer`` or ``accelerate``, from the manifest's
``evaluation.framework``). The framework's module is wrapped when it is first imported (an
import hook, as the challenge seed's), so the script is unchanged:

- ``trainer``: ``transformers.Trainer.train`` saves the model's parameters before training
  (``initial.pt``) and after it (``final.pt``) on the job's first process;
- ``accelerate``: the first module ``Accelerator.prepare`` is given is the model: its
  parameters are saved then (``initial.pt``) and when the process exits normally
  (``final.pt``), on the main process.

In a draft's dry run (``INFRARSI_SAY_WORLD``) it also says, on standard error, how many
processes the framework saw training together: a launcher may start fewer than it was asked
for (accelerate's ``--cpu`` starts one on a host without GPUs), and then the ranks are no knob.

Both write where ``INFRARSI_WEIGHTS_DIR`` says, as ``probe.save_weights`` does (a name ->
tensor dict, written aside then renamed), so the harness checks them as it checks the bundled
workloads': against the baseline's, and with the unpatched code on held-out data.
"""

import atexit
import os
import sys

ENV = "INFRARSI_SAVE_PARAMS"
WORLD_LINE = "infrarsi: processes training together: "
_MODULES = {"trainer": "transformers.trainer", "accelerate": "accelerate.accelerator"}


def save(name, module):
    """``module``'s parameters (each once, under its first name) as ``<name>.pt``."""
    import torch

    folder = os.environ.get("INFRARSI_WEIGHTS_DIR")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    params = {k: v.detach().to("cpu", copy=True) for k, v in module.named_parameters()}
    tmp = os.path.join(folder, f".{name}.pt.tmp")
    torch.save(params, tmp)
    os.replace(tmp, os.path.join(folder, f"{name}.pt"))


def say_world(size):
    """Where the harness asks (a draft's dry run): how many processes train together."""
    if os.environ.get("INFRARSI_SAY_WORLD") == "1":
        sys.stderr.write(f"{WORLD_LINE}{size}\n")
        sys.stderr.flush()


def _wrap_trainer(module):
    cls = module.Trainer
    train = cls.train

    def train_and_save(self, *args, **kwargs):
        first = self.args.process_index == 0
        if first:
            say_world(self.args.world_size)
            if self.model is not None:  # a model_init makes it inside train: no initial set
                save("initial", self.model)
        out = train(self, *args, **kwargs)
        if first:
            save("final", self.accelerator.unwrap_model(self.model))
        return out

    train_and_save.__wrapped__ = train
    cls.train = train_and_save


def _wrap_accelerator(module):
    cls = module.Accelerator
    prepare = cls.prepare
    import torch

    def prepare_and_save(self, *args, **kwargs):
        out = prepare(self, *args, **kwargs)
        model = next((a for a in args if isinstance(a, torch.nn.Module)), None)
        if model is not None and not getattr(cls, "_infrarsi_model", None):
            cls._infrarsi_model = model
            if self.is_main_process:
                say_world(self.num_processes)
                save("initial", model)
                atexit.register(save, "final", model)
        return out

    prepare_and_save.__wrapped__ = prepare
    cls.prepare = prepare_and_save


_WRAPS = {"trainer": _wrap_trainer, "accelerate": _wrap_accelerator}


def install():
    """Save the parameters through the framework the harness names, when it names one."""
    from infrarsi_after import after_import  # beside this file, on the hooks' path

    framework = os.environ.get(ENV)
    if framework in _MODULES:
        after_import(_MODULES[framework], _WRAPS[framework])
