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
"backwards", "world", "skipped", "step_time_s"}`` — a step a gradient scaler skipped (its
optimizer not called) counted as the iteration it was, ``skipped`` true; a step's time runs
from the end of the one before (the first's from the first forward of any module, or its first
backward). With ``INFRARSI_OBSERVE_REPORT`` the same steps go to the harness's metrics
channel (``INFRARSI_METRICS_SOCKET``) in the probe's record kinds (``start`` at the first
forward, ``step``, ``end`` with the rank's peak memory), where the harness times each on
arrival: a script that prints nothing per step is measured all the same. With
``INFRARSI_OBSERVE_WEIGHTS`` (a folder) the parameters the optimizer holds, named by the
module that owns them, are saved before the first step (``initial.pt``) and after the last
(``final.pt``, at exit). With
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
REPORT_ENV = "INFRARSI_OBSERVE_REPORT"
SOCKET_ENV = "INFRARSI_METRICS_SOCKET"
STOPPED_LINE = "infrarsi: stopped after optimizer step "


class _Observer:
    """What one rank's training did, written as it happens."""

    def __init__(self, path, weights, stop_after, report=None):
        self.path, self.weights, self.stop_after = path, weights, stop_after
        self.report = report  # the harness's channel (``_Report``), or None
        self.file = None
        self.begun = False  # the training's first forward, backward or step was seen
        self.primary = None  # the optimizer whose steps count
        self.others = set()  # ids of other optimizers that stepped
        self.step = 0
        self.roots = []  # detached scalar roots of backward since the last counted step
        self.backwards = 0
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
    def begin(self, device="cpu"):
        """The training's first moment (a forward, a backward or a step): the first step's
        time counts from here, and the channel's ``start`` record goes now."""
        if self.begun:
            return
        self.begun, self.last_t = True, time.perf_counter()
        if self.report is not None:
            self.report.send(
                {
                    "kind": "start",
                    "schema_version": 1,
                    "source": "observer",
                    "rank": _rank(),
                    "pid": os.getpid(),
                    "unix_time_s": time.time(),
                    "world_size": _world(self.world),
                    "device": str(device),
                }
            )

    def before_step(self, optimizer, args, kwargs):
        self._past_the_last()
        if self.primary is None:
            self._first(optimizer)
        elif optimizer is not self.primary and id(optimizer) not in self.others:
            self.others.add(id(optimizer))
            self.write({"kind": "optimizer", "name": type(optimizer).__name__})

    def _first(self, optimizer):
        """The first optimizer to step is the one whose steps count."""
        self.primary = optimizer
        self.begin(_device_of(optimizer))
        self.write(
            {
                "kind": "start",
                "optimizer": type(optimizer).__name__,
                "world": self.world,
                "pid": os.getpid(),
            }
        )
        self._save("initial")

    def after_step(self, optimizer, args, kwargs):
        if optimizer is self.primary:
            self._counted(skipped=False)

    def scaler_skipped(self, optimizer):
        """A gradient scaler found infinite gradients and did not call the optimizer: the
        iteration is still one step of the schedule, counted and said."""
        self._past_the_last()
        if self.primary is None:
            self._first(optimizer)
        if optimizer is self.primary:
            self._counted(skipped=True)

    def _counted(self, skipped):
        now = time.perf_counter()
        losses = _values(self.roots)
        record = {
            "kind": "step",
            "step": self.step,
            "loss": sum(losses) if losses else None,
            "losses": losses,
            "backwards": self.backwards,
            "world": self.world,
            "skipped": skipped,
            "step_time_s": now - self.last_t,
        }
        self.write(record)
        if self.report is not None:
            self.report.send({**record, "tokens": None, "phases_s": {}, "unix_time_s": time.time()})
        self.step += 1
        self.roots, self.backwards, self.last_t = [], 0, now

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
        self.begin(getattr(root, "device", "cpu"))
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
            if self.report is not None:
                self.report.send(
                    {
                        "kind": "end",
                        "steps": self.step,
                        "peak_mem_bytes": _peak_mem_bytes(_device_of(self.primary)),
                        "peak_rss_bytes": _peak_rss_bytes(),
                        "unix_time_s": time.time(),
                    }
                )
                self.report.close()

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


class _Report:
    """The observer's records on the harness's channel: a Unix socket at any path (``@name``:
    an abstract one) or ``tcp:HOST:PORT``; a channel that cannot be reached ends the reports
    (the harness then finds no steps and says so), never the training."""

    def __init__(self, address):
        self.address, self.sock, self.broken = address, None, False

    def send(self, record):
        if self.broken:
            return
        try:
            if self.sock is None:
                self.sock = _connect(self.address)
            self.sock.sendall((json.dumps(record, default=str) + "\n").encode())
        except (OSError, ValueError) as exc:
            self.broken = True
            sys.stderr.write(f"infrarsi: the observer cannot report to the harness: {exc}\n")

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _connect(address):
    import socket

    if address.startswith("tcp:"):
        host, port = address[4:].rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if address.startswith("@"):
        sock.connect("\0" + address[1:])
    elif len(os.fsencode(address)) < 100:
        sock.connect(address)
    else:  # longer than a socket address holds: through its folder's descriptor
        folder = os.open(os.path.dirname(address) or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(address)}")
        finally:
            os.close(folder)
    return sock


def _device_of(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p.device
    return "cpu"


def _world(seen):
    """The world size: the process group's where one is up, else the launcher's setting."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return max(seen, int(os.environ.get("WORLD_SIZE", "1")))


def _peak_rss_bytes():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _peak_mem_bytes(device):
    """The rank's peak memory: the device's most reserved on CUDA, the peak RSS on a CPU."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return int(torch.cuda.max_memory_reserved(device))
    return _peak_rss_bytes()


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
    _first_forward(torch, observer)
    _wrap_scaler(torch, observer)
    _wrap_values(torch, observer)


def _first_forward(torch, observer):
    """The training's first moment is the first forward of any module: a global hook that
    removes itself there (no cost on any later call)."""
    from torch.nn.modules import module

    def first(mod, args):
        handle.remove()
        param = next(mod.parameters(), None)
        observer.begin(param.device if param is not None else "cpu")
        batch = args[0] if args else None
        if hasattr(batch, "shape") and len(batch.shape) > 0:  # the rows the model was given
            observer.seen("forward.batch", int(batch.shape[0]))
            if len(batch.shape) == 2 and not batch.is_floating_point():  # token ids
                observer.seen("forward.tokens", int(batch.shape[1]))

    handle = module.register_module_forward_pre_hook(first)


def _wrap_scaler(torch, observer):
    """A gradient scaler's step that did not call its optimizer (infinite gradients) is
    counted as the skipped iteration it is."""
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is None:
        return
    step = scaler.step

    def scaler_step(self, optimizer, *args, **kwargs):
        before = observer.step
        out = step(self, optimizer, *args, **kwargs)
        if observer.step == before:
            observer.scaler_skipped(optimizer)
        return out

    scaler.step = scaler_step


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


def _wrap_click(click_core, observer):
    """click's (and so typer's) parsed options, as argparse's are: each command's values
    once its context is made."""
    make = click_core.Command.make_context

    def make_context(self, *args, **kwargs):
        ctx = make(self, *args, **kwargs)
        observer.write({"kind": "args", "values": dict(ctx.params)})
        return ctx

    click_core.Command.make_context = make_context


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
    address = os.environ.get(SOCKET_ENV) if os.environ.get(REPORT_ENV) else None
    observer = _Observer(
        _in_trial(path.replace("{rank}", str(_rank()))),
        _in_trial(os.environ.get(WEIGHTS_ENV)),
        int(stop) if stop and stop.isdigit() else None,
        _Report(address) if address else None,
    )
    _wrap_argparse(observer)
    after_import("click.core", lambda core: _wrap_click(core, observer))
    atexit.register(observer.final)
    after_import("torch", lambda torch: _install_torch(torch, observer))
