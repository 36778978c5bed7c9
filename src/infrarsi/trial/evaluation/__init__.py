"""The harness's own evidence of what a trial learned: its parameters and the reference code's
judgement of them.

After an ``ok`` trial the harness takes the final (and initial) parameters the locked loop
saved, maps them back to the reference layout when a patch re-laid them out (the patched model
module's ``to_reference_params(params) -> params``, run in a process of its own inside the
trial's workspace on coded tensors, never the trained ones: the harness applies the
re-indexing it derives from them, see ``remap``), and evaluates them with the *unpatched*
workload — a fresh copy of the original files — on held-out data, in another process. The
loss a patched model reports is a symptom; this is the proof that ``verify`` compares.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infrarsi.paths import sha256_file
from infrarsi.records.trial import Evaluation
from infrarsi.trial.evaluation.frameworks import SCRIPTS, framework_command
from infrarsi.trial.evaluation.server import SERVER, Completed, isolation_for
from infrarsi.workloads.folder import copy_workload

if TYPE_CHECKING:
    from infrarsi.trial.spec import TrialSpec

WEIGHTS_DIR = "weights"
REMAP_MODULE = "model"
MAPPING = "to_reference_params"  # what a patch that re-lays-out parameters defines
# Runs in the trial's workspace, on the harness's coded tensors only (never the trained
# parameters): what the patched module's mapping back to the reference layout does to them.
_REMAP = """
import importlib, sys, torch
module_name, pairs = sys.argv[1], sys.argv[2:]
try:
    module = importlib.import_module(module_name)
except ImportError:
    module = None
mapping = getattr(module, "to_reference_params", None)
for src, dst in zip(pairs[::2], pairs[1::2]):
    coded = torch.load(src, map_location="cpu", weights_only=True)
    torch.save(dict(mapping(coded)) if mapping else None, dst)
"""


def weights_dir(trial_dir: Path) -> Path:
    """Where the locked loop saves parameters (``INFRARSI_WEIGHTS_DIR``)."""
    return Path(trial_dir) / WEIGHTS_DIR


def evaluate(spec: TrialSpec, trial_dir: Path, workspace: Path) -> Evaluation | None:
    """The trial's parameters in the reference layout, and their held-out loss; None when the
    workload declares no evaluation. What could not be done is said in ``error``."""
    how = spec.manifest.evaluation
    if how is None:
        return None
    t0 = time.monotonic()
    found = {}
    for name, template in (("final", how.final_weights), ("initial", how.initial_weights)):
        path = _locate(template, trial_dir, workspace)
        if path is not None and path.is_file():
            found[name] = path
    if "final" not in found:
        return Evaluation(
            error=f"the workload wrote no final parameters at {how.final_weights}",
            cost_s=time.monotonic() - t0,
        )
    # a patch's code maps the parameters only where it defines the mapping: watch what it
    # touches, and charge its time; without one the saved layout is the reference's
    remaps = bool(spec.patches) and defines_mapping(workspace)
    saved = {name: sha256_file(path) for name, path in found.items()} if remaps else {}
    try:
        t_remap = time.monotonic()
        ref = _to_reference(spec, found, trial_dir, workspace, remaps)
        remap_s = time.monotonic() - t_remap if remaps else 0.0
        changed = [name for name, path in saved.items() if sha256_file(found[name]) != saved[name]]
        if changed:
            raise RuntimeError(
                f"the saved {' and '.join(changed)} parameters changed after the "
                "training ended (while the patch's mapping ran)"
            )
        result = _run_reference(spec, trial_dir, ref) if how.command else {}
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
        return Evaluation(
            final_weights=str(found["final"]), error=str(exc)[-1000:], cost_s=time.monotonic() - t0
        )
    return Evaluation(
        final_weights=str(ref["final"]),
        initial_weights=str(ref.get("initial") or "") or None,
        final_sha256=sha256_file(ref["final"]),
        eval_loss=result.get("eval_loss"),
        initial_eval_loss=result.get("initial_eval_loss"),
        layout_problems=result.get("layout_problems", []),
        inert_params=result.get("inert_params", []),
        aliases=result.get("aliases", {}),
        remapped=remaps,
        remap_s=remap_s,
        cost_s=time.monotonic() - t0,
    )


def _locate(template: str | None, trial_dir: Path, workspace: Path) -> Path | None:
    if template is None:
        return None
    return workspace / template.format(weights_dir=weights_dir(trial_dir))


def defines_mapping(workspace: Path) -> bool:
    """Whether the patched workspace's code names ``to_reference_params`` at all: a patch that
    does not is never run to map the parameters (its saved layout must be the reference's, the
    strictest reading), so it costs no mapping process and no seconds of it."""
    for path in Path(workspace).rglob("*.py"):
        try:
            if MAPPING in path.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def _to_reference(
    spec: TrialSpec, found: dict[str, Path], trial_dir: Path, workspace: Path, remaps: bool
) -> dict[str, Path]:
    """The parameters as plain name -> tensor files in the reference layout.

    A patch's ``to_reference_params`` never sees the trained parameters: it runs (isolated, in
    the trial's workspace) on tensors the harness makes with the saved ones' names and shapes,
    every element a code drawn now (``remap.coded``); its output must be a re-indexing of its
    input (``remap.index_map``), and the harness applies that index map to the saved files
    itself. A mapping that computes anything — adds a stored update, reads a file — is refused.
    """
    key = spec.manifest.evaluation.key or "" if spec.manifest.evaluation else ""
    if not spec.patches and not key:
        return found  # the workload's own code saved them: its names are the reference's
    import torch  # the harness's own tensors: imported only where parameters are mapped

    from infrarsi.trial.evaluation import remap

    folder = weights_dir(trial_dir)
    folder.mkdir(parents=True, exist_ok=True)
    saved = {name: remap.load_saved(path, key) for name, path in found.items()}
    out = {name: folder / f"{name}.reference.pt" for name in found}
    if not remaps:
        for name in found:
            torch.save(saved[name], out[name])
        return out
    codes = {name: remap.coded(params) for name, params in saved.items()}
    pairs: list[str] = []
    for name in found:
        probe_in, probe_out = folder / f"{name}.coded.pt", folder / f"{name}.coded-out.pt"
        torch.save(codes[name].tensors, probe_in)
        pairs += [str(probe_in), str(probe_out)]
    script = folder / "remap.py"
    script.write_text(_REMAP)
    done = _python(str(script), [REMAP_MODULE, *pairs], workspace, folder / "remap", 120, trial_dir)
    if done.returncode != 0:
        raise RuntimeError(
            f"mapping the parameters to the reference layout failed: {done.stderr.strip()[-800:]}"
        )
    for name, mapped_file in zip(found, pairs[1::2]):
        mapped = torch.load(mapped_file, map_location="cpu", weights_only=True)
        index = None if mapped is None else remap.index_map(codes[name], mapped)
        torch.save(saved[name] if index is None else remap.apply(saved[name], index), out[name])
    return out


def _python(
    script: str, args: list[str], cwd: Path, logs: Path, timeout_s: float, trial_dir: Path
) -> Completed:
    """``python script args`` in ``cwd``, in a fork of the warm evaluation server that sees
    this trial's folder only."""
    return SERVER.run(script, args, cwd, logs, timeout_s, isolation_for(trial_dir))


def _run_reference(spec: TrialSpec, trial_dir: Path, ref: dict[str, Path]) -> dict[str, Any]:
    """Run the manifest's evaluation command in a fresh, unpatched copy of the workload, in a
    folder the harness makes anew beside the trial's (never one the trial could have made or
    seen: trials see their own folder only), on copies of the parameters; the evaluation's
    process sees that folder only. The parameters it judged are its copies."""
    root = Path(
        tempfile.mkdtemp(prefix=f".{Path(trial_dir).name}.evaluation-", dir=Path(trial_dir).parent)
    )
    code = root / "code"
    copy_workload(spec.manifest.root, code, "patches")
    copies = {}
    for name, path in ref.items():
        copies[name] = root / f"{name}.pt"
        shutil.copyfile(path, copies[name])
    ref.update(copies)
    fields = {k: int(v) if isinstance(v, bool) else v for k, v in spec.params().items()}
    fields.update(
        weights=str(copies["final"]),
        initial_weights=str(copies.get("initial", "")),
        weights_dir=str(root),
    )
    declared = spec.manifest.evaluation.command if spec.manifest.evaluation else None
    if not declared:
        raise ValueError("the workload declares no evaluation command")
    command = [part.format(**fields) for part in declared]
    framework = spec.manifest.evaluation.framework if spec.manifest.evaluation else None
    if framework in SCRIPTS:  # the script's own framework judges, its training replaced
        command = framework_command(
            framework, root, command, str(copies["final"]), str(copies.get("initial", ""))
        )
    if (
        Path(command[0]).name in ("python", "python3")
        and command[1:2]
        and command[1].endswith(".py")
    ):
        done: Completed | subprocess.CompletedProcess[str] = _python(
            command[1], command[2:], code, root / "evaluation", spec.effective_timeout_s, root
        )
    else:
        done = subprocess.run(
            command, cwd=code, capture_output=True, text=True, timeout=spec.effective_timeout_s
        )
    (Path(trial_dir) / "evaluation.out").write_text(done.stdout)
    (Path(trial_dir) / "evaluation.err").write_text(done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"the reference evaluation failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result
