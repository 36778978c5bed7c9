"""Per-step metrics for a training loop: the few lines a script adds so InfraRSI can measure it.

Depends only on torch and the standard library, so a training script can import it anywhere.
A loop adds three to five lines::

    from infrarsi import probe
    p = probe.Probe(device=device)           # finds the harness's channel; inert when unset
    p.watch_comm(model)                       # optional: measures exposed gradient communication
    for step in range(steps):
        with p.step(tokens=tokens_per_step) as s:
            with s.phase("data"): x, y = next_batch()
            with s.phase("forward"): loss = model(x, y)
            with s.phase("backward"): loss.backward()
            with s.phase("optimizer"): opt.step(); opt.zero_grad()
            s.loss = loss.item()
    p.close()                                 # writes peak memory of this rank

Each rank sends JSON lines over the socket the harness opened and names in
``INFRARSI_METRICS_SOCKET`` (a Unix socket in the trial's folder; ``@name``: an abstract one), where
the harness times each line on arrival and keeps it; without one, to the file named in
``INFRARSI_METRICS_FILE`` (``{rank}`` in the name is replaced by the rank). Line kinds: ``start``,
``step`` (wall time, loss, tokens, phase seconds) and ``end`` (peak memory). When
``INFRARSI_PROFILE_FILE`` is set, rank 0 runs ``torch.profiler`` over two steps from
``INFRARSI_PROFILE_STEP`` and writes the operators there.
Phase times are wall-clock spans; on CUDA the device is
synchronised at each phase boundary so a phase owns its kernels. ``comm`` is the exposed
gradient communication: the time backward keeps running after the last gradient was produced.
``save_weights`` saves the initial and final parameters where ``INFRARSI_WEIGHTS_DIR`` says.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from infrarsi.unixpath import at_path

METRICS_ENV = "INFRARSI_METRICS_FILE"
SOCKET_ENV = "INFRARSI_METRICS_SOCKET"  # the harness's channel: preferred to the file
WEIGHTS_ENV = "INFRARSI_WEIGHTS_DIR"  # where the loop saves initial and final weights
PROFILE_ENV = "INFRARSI_PROFILE_FILE"  # rank 0 profiles operators into this JSON file
PROFILE_STEP_ENV = "INFRARSI_PROFILE_STEP"  # first profiled step (after warm-up)
PROFILE_STEPS = 2
SCHEMA_VERSION = 1


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def vm_data_bytes() -> int:
    """This process's private writable memory (VmData), the quantity RLIMIT_DATA caps."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss_bytes() -> int:
    """Peak resident set size of this process since it started (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def save_weights(name: str, params: dict[str, torch.Tensor]) -> None:
    """Save parameters (name -> tensor) as ``<name>.pt`` where the harness asks; a no-op when
    it does not. The loop calls it on one rank with the full, unsharded parameters: the
    harness compares them with the baseline's and evaluates them with the reference code."""
    folder = os.environ.get(WEIGHTS_ENV)
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.pt.tmp")
    torch.save({k: v.detach().to("cpu", copy=True) for k, v in params.items()}, tmp)
    os.replace(tmp, os.path.join(folder, f"{name}.pt"))


class _SocketLines:
    """Each ``write`` goes to the harness's Unix socket at once (``@name``: abstract; or
    ``tcp:HOST:PORT`` from another host), so the harness times every line when it is written,
    not when a buffer fills."""

    def __init__(self, address: str) -> None:
        if address.startswith("tcp:"):  # a rank on another host than the harness
            host, port = address[4:].rsplit(":", 1)
            self._sock = socket.create_connection((host, int(port)))
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if address.startswith("@"):
            self._sock.connect("\0" + address[1:])
        else:
            at_path(self._sock.connect, address)

    def write(self, text: str) -> None:
        self._sock.sendall(text.encode())

    def close(self) -> None:
        self._sock.close()


def _connect(address: str) -> _SocketLines:
    return _SocketLines(address)


class Step:
    """One optimizer step being measured; phases nest inside it, ``loss`` is set by the loop."""

    def __init__(self, probe: Probe, tokens: int) -> None:
        self._probe = probe
        self.tokens = tokens
        self.loss: float | None = None
        self.phases_s: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one phase of the step (forward, backward, optimizer, data, ...); repeats add up."""
        self._probe._sync()
        t0 = time.perf_counter()
        self._probe._last_grad_t = None
        try:
            yield
        finally:
            self._probe._sync()
            t1 = time.perf_counter()
            elapsed = t1 - t0
            last_grad = self._probe._last_grad_t
            if name == "backward" and last_grad is not None and t0 < last_grad <= t1:
                exposed = t1 - last_grad
                self.phases_s["comm"] = self.phases_s.get("comm", 0.0) + exposed
                elapsed -= exposed
            self.phases_s[name] = self.phases_s.get(name, 0.0) + elapsed


class Probe:
    """Writes per-step metrics of one rank as JSON lines; every method is a no-op when inert."""

    def __init__(self, device: torch.device | str | None = None, path: str | None = None) -> None:
        address = os.environ.get(SOCKET_ENV) if path is None else None
        path = path if path is not None else os.environ.get(METRICS_ENV)
        self.rank = _rank()
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._file: Any = None  # the metrics channel: a socket's lines or a file
        self._step_index = 0
        self._peak_vm_data = vm_data_bytes()
        self._last_grad_t: float | None = None
        self._profile_path = os.environ.get(PROFILE_ENV) if self.rank == 0 else None
        self._profile_start = int(os.environ.get(PROFILE_STEP_ENV, "2"))
        self._profiler: Any = None
        self._profiled_s = 0.0
        if address:
            self._file = _connect(address)
        elif path:
            self._file = open(path.replace("{rank}", str(self.rank)), "a", buffering=1)
        if self._file is not None:
            self._write(
                {
                    "kind": "start",
                    "schema_version": SCHEMA_VERSION,
                    "rank": self.rank,
                    "pid": os.getpid(),
                    "unix_time_s": time.time(),
                    "world_size": int(os.environ.get("WORLD_SIZE", "1")),
                    "torch_version": torch.__version__,
                    "device": str(self.device),
                }
            )

    @property
    def active(self) -> bool:
        """True when a metrics file is being written."""
        return self._file is not None

    def watch_comm(self, model: torch.nn.Module) -> None:
        """Note when each gradient is produced, so backward's exposed communication is measured."""

        def mark(_param: torch.Tensor) -> None:
            self._last_grad_t = time.perf_counter()

        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(mark)

    @contextmanager
    def step(self, tokens: int) -> Iterator[Step]:
        """Measure one optimizer step that consumes ``tokens`` tokens over all ranks."""
        step = Step(self, tokens)
        self._maybe_start_profiler()
        self._sync()
        t0 = time.perf_counter()
        yield step
        self._sync()
        wall_s = time.perf_counter() - t0
        self._maybe_stop_profiler(wall_s)
        self._peak_vm_data = max(self._peak_vm_data, vm_data_bytes())
        self._write(
            {
                "kind": "step",
                "step": self._step_index,
                "step_time_s": wall_s,
                "loss": step.loss,
                "tokens": step.tokens,
                "phases_s": step.phases_s,
                "unix_time_s": time.time(),
            }
        )
        self._step_index += 1

    def close(self) -> None:
        """Write this rank's peak memory and close the file; call once after the last step."""
        if self._file is None:
            return
        if self.device.type == "cuda":
            peak_mem = torch.cuda.max_memory_reserved(self.device)
        else:
            peak_mem = peak_rss_bytes()
        self._peak_vm_data = max(self._peak_vm_data, vm_data_bytes())
        self._write(
            {
                "kind": "end",
                "steps": self._step_index,
                "peak_mem_bytes": peak_mem,
                "peak_rss_bytes": peak_rss_bytes(),
                "peak_vm_data_bytes": self._peak_vm_data,
                "unix_time_s": time.time(),
            }
        )
        self._file.close()
        self._file = None

    def _maybe_start_profiler(self) -> None:
        if self._profile_path and self._step_index == self._profile_start:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities)
            self._profiler.__enter__()

    def _maybe_stop_profiler(self, wall_s: float) -> None:
        if self._profiler is None or self._profile_path is None:
            return
        self._profiled_s += wall_s
        if self._step_index + 1 < self._profile_start + PROFILE_STEPS:
            return
        self._profiler.__exit__(None, None, None)
        ops = [
            {
                "name": e.key,
                "calls": e.count,
                "self_cpu_s": e.self_cpu_time_total / 1e6,
                "self_device_s": getattr(e, "self_device_time_total", 0) / 1e6,
            }
            for e in self._profiler.key_averages()
        ]
        with open(self._profile_path, "w") as f:
            json.dump({"steps": PROFILE_STEPS, "wall_s": self._profiled_s, "ops": ops}, f)
        self._profiler = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
