"""The harness's observer of a rank's training, through PyTorch itself: whatever the script is
called, whatever it prints, it trains through an optimizer's steps and the roots of
``backward``. Standard library only at import; installed by the bootstrap hook in each rank
when the harness sets ``INFRARSI_OBSERVE`` (the file its records go to, ``{rank}`` replaced;
relative: in the trial's folder), the script unchanged; a file it cannot write ends its
records, never the training. Once ``torch`` is imported it hooks

- every optimizer's steps (``register_optimizer_step_pre_hook`` / ``..._post_hook``): the
  first optimizer that steps is the one whose steps count (others are counted and said); a
  step a gradient scaler skips is said with the next one; a closure's backward calls (LBFGS)
  count within their step;
- the roots of ``backward`` (``torch.autograd.backward``, which ``Tensor.backward`` calls):
  each scalar root's value (the loss as it reached backward), taken once per step, and how
  many backward calls the step ran (the accumulation actually run);
- ``torch.distributed.init_process_group`` (the world size), the values that reach
  ``DataLoader(batch_size=)``, ``torch.set_num_threads``, an autocast region's dtype, and the
  arguments ``argparse`` parsed — what a draft confirms an argument's role by.

Per optimizer step it writes ``{"kind": "step", "step", "loss" (the sum of the roots: the
step's mean loss where each micro-batch's is divided by the accumulation), "losses",
"backwards", "world", "step_time_s"}``. With ``INFRARSI_OBSERVE_WEIGHTS`` (a folder) the
parameters the optimizer holds, named by the module that owns them, are saved before the first
step (``initial.pt``) and after the last (``final.pt``, at exit). With
``INFRARSI_STOP_AFTER_STEPS`` = N every rank ends cleanly once its N-th step is done and the
next begins (its first backward or optimizer step: the script has logged the N-th by then; the
final parameters saved first, before any collective of the next step starts): a trial is N
steps of the script's own schedule, whatever argument it has or lacks for the step count.

The observer runs in the rank, where a patch's code runs too: what it reports has the trust of
``probe.save_weights`` and the framework hooks, no more; what decides stays the harness's.
"""

import atexit
import json
import os
import sys
import time

ENV = "INFRARSI_OBSERVE"
WEIGHTS_ENV = "INFRARSI_OBSERVE_WEIGHTS"
STOP_ENV = "INFRARSI_STOP_AFTER_STEPS"
STOPPED_LINE = "infrarsi: stopped after optimizer step "


class _Observer:
    """What one rank's training did, written as it happens."""

    def __init__(self, path, weights, stop_after):
        self.path, self.weights, self.stop_after = path, weights, stop_after
        self.file = None
        self.primary = None  # the optimizer whose steps count
        self.others = set()  # ids of other optimizers that stepped
        self.step = 0
        self.roots = []  # detached scalar roots of backward since the last counted step
        self.backwards = 0
        self.skipped = 0
        self.world = 1
        self.last_t = None
        self.model = None
        self.saved_final = False
        self.broken = False

    def write(self, record):
        """One record; a file that cannot be written ends the records, never the training."""
        if self.broken:
            return
        try:
            if self.file is None:
                self.file = open(self.path, "a", buffering=1)
            self.file.write(json.dumps(record, default=str) + "\n")
        except (OSError, TypeError, ValueError) as exc:
            self.broken = True
            sys.stderr.write(f"infrarsi: the observer cannot write {self.path}: {exc}\n")

    def seen(self, what, value):
        """A value that reached PyTorch (a batch size, a thread count, a dtype, ...)."""
        self.write({"kind": "seen", "what": what, "value": value})

    # -- optimizer steps -----------------------------------------------------------------
    def before_step(self, optimizer, args, kwargs):
        self._past_the_last()
        if self.primary is None:
            self.primary = optimizer
            self.last_t = time.perf_counter()
            self.write(
                {
                    "kind": "start",
                    "optimizer": type(optimizer).__name__,
                    "world": self.world,
                    "pid": os.getpid(),
                }
            )
            self._save("initial")
        elif optimizer is not self.primary and id(optimizer) not in self.others:
            self.others.add(id(optimizer))
            self.write({"kind": "optimizer", "name": type(optimizer).__name__})

    def after_step(self, optimizer, args, kwargs):
        if optimizer is not self.primary:
            return
        now = time.perf_counter()
        losses = _values(self.roots)
        self.write(
            {
                "kind": "step",
                "step": self.step,
                "loss": sum(losses) if losses else None,
                "losses": losses,
                "backwards": self.backwards,
                "world": self.world,
                "skipped_before": self.skipped,
                "step_time_s": now - self.last_t,
            }
        )
        self.step += 1
        self.roots, self.backwards, self.skipped, self.last_t = [], 0, 0, now

    def _past_the_last(self):
        """The N-th step is done and the next has begun (its first backward, or its optimizer
        step): the script has logged the N-th, so the rank ends now."""
        if self.stop_after and self.step >= self.stop_after:
            self.stop()

    def stop(self):
        """End the rank cleanly after its N-th step: the final parameters first, then a line
        that says so, then exit with success (no tear-down a framework might hang in)."""
        self.final()
        sys.stderr.write(f"{STOPPED_LINE}{self.step}\n")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        if self.file is not None:
            self.file.close()
        os._exit(0)

    # -- backward ------------------------------------------------------------------------
    def backward_root(self, tensors):
        self._past_the_last()
        self.backwards += 1
        root = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        try:
            if root.numel() == 1:
                self.roots.append(root.detach().reshape(()).float())
        except (AttributeError, RuntimeError):
            pass

    # -- parameters ----------------------------------------------------------------------
    def final(self):
        if not self.saved_final and self.primary is not None:
            self.saved_final = True
            self._save("final")
            self.write({"kind": "end", "steps": self.step})

    def _save(self, name):
        if not self.weights or _rank() != 0 or self.primary is None:
            return
        import torch

        params = held_params(self.primary, self)
        try:
            os.makedirs(self.weights, exist_ok=True)
            tmp = os.path.join(self.weights, f".{name}.pt.tmp")
            torch.save({k: v.detach().to("cpu", copy=True) for k, v in params.items()}, tmp)
            os.replace(tmp, os.path.join(self.weights, f"{name}.pt"))
        except OSError as exc:  # the evidence is missing: the harness says so, training goes on
            sys.stderr.write(f"infrarsi: the observer cannot save {name}.pt: {exc}\n")


def _values(roots):
    """The roots' values as floats, read in one transfer (one device sync a step, not one a
    micro-step)."""
    if not roots:
        return []
    import torch

    try:
        return [float(v) for v in torch.stack(roots).tolist()]
    except RuntimeError:  # roots on several devices
        return [float(t) for t in roots]


def _rank():
    return int(os.environ.get("RANK", "0"))


def held_params(optimizer, observer=None):
    """The parameters ``optimizer`` holds, each named by the module that owns it (``owner``),
    the rest named by their group and place."""
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    model = observer.model if observer is not None else None
    if model is None:
        model = owner(ids)
        if observer is not None:
            observer.model = model
    named = {}
    for name, p in model.named_parameters() if model is not None else ():
        if id(p) in ids:
            named.setdefault(id(p), name)
    out = {}
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            out[named.get(id(p), f"optimizer.group{g}.param{i}")] = p
    return out


def owner(ids):
    """The module that owns the parameters whose ids are ``ids``: of the live modules whose
    parameters cover the most of them, the innermost (the model, not a wrapper of it)."""
    import gc

    import torch

    best, cover = [], 0
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.nn.Module):  # type(): no attribute of a lazy object read
            n = sum(id(p) in ids for p in obj.parameters())
            if n > cover:
                best, cover = [obj], n
            elif n == cover and n:
                best.append(obj)
    inner = [m for m in best if not any(o is not m and o in set(m.modules()) for o in best)]
    return inner[0] if len(inner) == 1 else (best[0] if best else None)


def _install_torch(torch, observer):
    from torch.optim import optimizer as optim

    optim.register_optimizer_step_pre_hook(observer.before_step)
    optim.register_optimizer_step_post_hook(observer.after_step)
    backward = torch.autograd.backward

    def observed_backward(tensors, *args, **kwargs):
        observer.backward_root(tensors)
        return backward(tensors, *args, **kwargs)

    observed_backward.__wrapped__ = backward
    torch.autograd.backward = observed_backward
    _wrap_values(torch, observer)


def _wrap_values(torch, observer):
    """The values a draft confirms roles by, as they reach PyTorch."""
    set_threads = torch.set_num_threads

    def threads(n):
        observer.seen("set_num_threads", n)
        return set_threads(n)

    torch.set_num_threads = threads
    loader = torch.utils.data.DataLoader
    init = loader.__init__

    def loader_init(self, dataset, batch_size=1, *args, **kwargs):
        observer.seen("dataloader.batch_size", batch_size)
        return init(self, dataset, batch_size, *args, **kwargs)

    loader.__init__ = loader_init
    autocast = torch.autocast
    autocast_init = autocast.__init__

    def autocast_enter(self, *args, **kwargs):
        autocast_init(self, *args, **kwargs)
        if getattr(self, "_enabled", True):
            observer.seen("autocast.dtype", str(getattr(self, "fast_dtype", "")))

    autocast.__init__ = autocast_enter
    import torch.distributed as dist

    init_pg = dist.init_process_group

    def init_process_group(*args, **kwargs):
        out = init_pg(*args, **kwargs)
        observer.world = dist.get_world_size()
        observer.seen("world_size", observer.world)
        return out

    dist.init_process_group = init_process_group


def _wrap_argparse(observer):
    import argparse

    parse = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, *args, **kwargs):
        namespace, rest = parse(self, *args, **kwargs)
        observer.write({"kind": "args", "values": vars(namespace)})
        return namespace, rest

    argparse.ArgumentParser.parse_known_args = parse_known_args


def _in_trial(path):
    """A relative path is in the trial's own folder (``INFRARSI_TRIAL_DIR``)."""
    if not path or os.path.isabs(path):
        return path
    return os.path.join(os.environ.get("INFRARSI_TRIAL_DIR", "."), path)


def install():
    """Observe this rank's training where the harness asks for it."""
    from infrarsi_after import after_import  # beside this file, on the hooks' path

    path = os.environ.get(ENV)
    if not path:
        return
    stop = os.environ.get(STOP_ENV)
    observer = _Observer(
        _in_trial(path.replace("{rank}", str(_rank()))),
        _in_trial(os.environ.get(WEIGHTS_ENV)),
        int(stop) if stop and stop.isdigit() else None,
    )
    _wrap_argparse(observer)
    atexit.register(observer.final)
    after_import("torch", lambda torch: _install_torch(torch, observer))
