"""The report as text: Markdown (figures linked) and HTML (figures embedded as data: URIs, no
script, no external resource — it renders with no network access)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from infrarsi.identity import changed_knobs
from infrarsi.proposal import ProposalStatus, patch_outcomes
from infrarsi.records.trial import TrialStatus
from infrarsi.units import format_bytes, format_ratio_bound

CAPTIONS = {
    "best_so_far.png": "Best so far vs trial (failures on the axis)",
    "time_vs_memory.png": "Step time vs peak memory per rank: OOM trials at the capacity line, "
    "the memory model's boundary",
    "phases.png": "Phases per steady step, baseline vs winner",
    "loss.png": "Loss curves, baseline vs winner",
    "memory_calibration.png": "Predicted vs measured peak memory, and P(OOM) calibration",
}

FAILED = {s.value for s in TrialStatus if s.is_failure()}  # cells shown as failures


_b = format_ratio_bound


def _x(v, fmt="{:.3f}"):
    return fmt.format(v) if v is not None else "-"


def _bytes(v):
    return format_bytes(int(v)) if v is not None else "-"


def headline(summary: dict) -> list[str]:
    """The summary lines, the same in both formats."""
    s, lines = summary, []
    lines.append(
        f"Workload {s['workload']} at scale {s['scale']}; run {s['run_id']} "
        f"({s['searcher']} searcher): {s['trials']} trials, {s['oom_trials']} out of "
        f"memory, {s.get('slow_trials', 0)} cut short as slow, "
        f"{s['search_cost_s']:.0f} s of search."
    )
    if s.get("headroom"):
        lines.append(f"Objective headroom (the Doctor's): {s['headroom']}.")
    w, b = s.get("winner"), s["baseline"]
    if w is None:
        lines.append(f"No winner promoted. {s['decision']}")
        return lines
    lines.append(
        f"Speed-up {w['speedup']:.3f}x over {w['rounds']} interleaved rounds against "
        f"the baseline, interval [{_b(w['ci_low'])}, {_b(w['ci_high'])}] (compared: "
        f"{s['compared']}); every check passed in every round."
    )
    lines.append(
        f"MFU {_x(b['mfu_pct'], '{:.2f}%')} -> {_x(w['mfu_pct'], '{:.2f}%')}; "
        f"step_time_s {_x(b['step_time_s'], '{:.4f}')} -> "
        f"{_x(w['step_time_s'], '{:.4f}')}; peak memory per rank "
        f"{_bytes(b['peak_mem_bytes'])} -> {_bytes(w['peak_mem_bytes'])}"
        + (f" (capacity {_bytes(s['capacity_bytes'])})" if s["capacity_bytes"] else "")
    )
    lines.append("What changed and why: " + ("; ".join(w["changes"]) or "nothing"))
    return lines


def trial_rows(data) -> list[list[str]]:
    """Every trial of the search and of Apply, failures included, with its cost."""
    base = data.summary["baseline"]["knobs"]
    rows = []
    for t in data.trials:
        config = t.configuration
        changed = ", ".join(f"{k}={v}" for k, v in changed_knobs(config.knob_dict, base).items())
        rows.append(
            [
                "run",
                str(t.seq),
                t.status,
                changed or "-",
                ", ".join(t.config_json["patches"]) or "-",  # in the order proposed
                _x(t.step_time_s, "{:.4f}"),
                _x(t.ranked_time_per_step_s(data.contract.objective), "{:.4f}")
                if t.status is not TrialStatus.SLOW
                else ">= " + _x(t.censored_time_per_step_s, "{:.4f}"),
                _x(t.predicted_ranked_time_per_step_s, "{:.4f}"),
                _bytes(t.peak_mem_bytes),
                _bytes(t.predicted_peak_bytes),
                _x(t.predicted_p_oom, "{:.2f}"),
                _x(t.cost_s, "{:.1f}"),
                (t.error or "")[:120],
            ]
        )
    by_label = {c.label: c for c in data.apply.candidates} if data.apply else {}
    for m in data.apply.measurements if data.apply else []:
        knobs_changed, patches = _changes(by_label.get(m.label), base)
        verdict = (
            "" if m.valid is None else ("checks passed" if m.valid else "; ".join(m.reasons)[:120])
        )
        rows.append(
            [
                "apply",
                f"r{m.round + 1} {m.label}",
                m.status,
                knobs_changed,
                patches,
                _x(m.step_time_s, "{:.4f}"),
                "-",
                "-",
                _bytes(m.peak_mem_bytes),
                "-",
                "-",
                _x(m.cost_s, "{:.1f}"),
                verdict,
            ]
        )
    return rows


def _changes(candidate, base: dict) -> tuple[str, str]:
    """A candidate's knobs changed from the baseline and its patches, as table cells ("-"
    for the baseline or a run that is no candidate)."""
    if candidate is None:
        return "-", "-"
    knobs = ", ".join(f"{k}={v}" for k, v in changed_knobs(candidate.knobs, base).items())
    return knobs or "-", ", ".join(candidate.patches) or "-"


HEADER = [
    "stage",
    "#",
    "status",
    "knobs changed",
    "patches",
    "step_time_s",
    "ranked_time_per_step_s",
    "predicted ranked_time_per_step_s",
    "peak",
    "predicted peak",
    "P(OOM)",
    "cost_s",
    "error / verdict",
]


BANK_HEADER = [
    "seed",
    "from (run @ host, workload, stage)",
    "similarity",
    "expected speed-up",
    "trials here",
    "measured speed-up",
    "held",
]


def bank_lines(data) -> tuple[str, list[list[str]]]:
    """The experience bank's part of the run: what it held, what it gave, what held here."""
    b = data.bank
    intro = (
        f"The bank ({b.bank_url}) held {b.experiences} experiences; {b.used} were similar "
        f"enough to this host and workload to weigh in (total similarity "
        f"{b.weight:.2f}); it gave {len(b.seeds)} seed(s) and priors over "
        f"{len(b.time_coefficients)} knob values and patches."
        + (" " + " ".join(b.notes) if b.notes else "")
    )
    base = data.summary["baseline"]["knobs"]
    rows = []
    for r in data.bank_seeds:
        changed = (
            ", ".join(f"{k}={v}" for k, v in changed_knobs(r["knobs"], base).items())
            or "baseline knobs"
        )
        held = {True: "held", False: "did not hold", None: "not measured"}[r["held"]]
        there = ", ".join(f"{k}={v}" for k, v in (r.get("as_measured") or {}).items())
        rows.append(
            [
                f"{changed}; {', '.join(r['patches']) or 'no patch'}"
                + (f" (ran there as {there})" if there else ""),
                "; ".join(
                    f"{x['run_id']} @ {x['hardware_fp']}, {x['workload']}, {x['stage']}"
                    for x in r["sources"]
                ),
                _x(r["similarity"], "{:.2f}"),
                _x(r["expected_speedup"]),
                str(r["trials"]),
                _x(r["measured_speedup"]),
                held,
            ]
        )
    return intro, rows


PROPOSAL_HEADER = [
    "n",
    "status",
    "stage",
    "reason",
    "patch",
    "expected step time",
    "smoke speed-up",
    "measured speed-up",
    "tokens",
    "seconds",
    "model / prompt",
]


def proposal_lines(data) -> tuple[str, list[list[str]]]:
    """The LLM's replies in order: what became of each, what it cost, and for an accepted
    patch its provenance and what the search measured of it."""
    lines = data.proposals
    accepted = [x for x in lines if x.status is ProposalStatus.ACCEPTED]
    intro = (
        f"{len(lines)} replies, {len(accepted)} accepted; "
        f"{sum(x.tokens for x in lines)} tokens and {sum(x.seconds for x in lines):.0f} s "
        "spent asking and validating. A rejected reply never cost a search trial."
    )
    measured = {
        o.patch_id: o.speedup
        for o in patch_outcomes(  # over the search's baseline
            [t for t in data.trials if t.status.is_finished()],
            data.summary["baseline"]["knobs"],
        )
    }
    rows = []
    for x in lines:
        rows.append(
            [
                str(x.n),
                x.status,
                x.stage,
                x.reason[:160],
                x.patch_id or "-",
                _x(x.expectation.step_time_ratio) if x.expectation else "-",
                _x(x.smoke_speedup),
                _x(measured.get(x.patch_id or "")),
                str(x.tokens),
                f"{x.seconds:.1f}",
                f"{x.model} / {x.prompt_sha256[:12]}",
            ]
        )
    return intro, rows


def next_steps(data) -> list[str]:
    """What to do now, as commands: apply the winner's patch in the workload's folder and
    launch it (empty when nothing was promoted)."""
    run_dir = Path(data.run_dir).resolve()
    patch, launch = run_dir / "winner.patch", run_dir / "launch.sh"
    if data.summary.get("winner") is None or not launch.exists():
        return []
    steps = []
    if patch.exists() and patch.read_text().strip():
        steps.append(f"cd {data.manifest.root} && git apply {patch}")
    return steps + [f"bash {launch}"]


def _md_section(
    title: str, intro: str, rows: list[list[str]], header: list[str] | tuple[str, ...]
) -> list[str]:
    """A titled Markdown section: its intro, then a table (a cell's pipes and line breaks
    written so they cannot break the table)."""
    out = ["", f"## {title}", "", intro, "", "| " + " | ".join(header) + " |"]
    out += ["|" + "---|" * len(header)]
    return out + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _cell(text: str) -> str:
    """A table cell's text with nothing that could end its cell or its row."""
    return text.replace("|", "/").replace("\n", " ")


def markdown_report(data, figure_dir: str) -> str:
    """``report.md``."""
    s = data.summary
    out = [f"# InfraRSI report: {s['workload']}", ""]
    steps = next_steps(data)
    if steps:
        out += ["## What to do now", "", "```bash", *steps, "```", ""]
    out += ["## Summary", ""]
    out += [f"- {line}" for line in headline(s)]
    if data.apply is not None:
        out += [
            "",
            "## Verification",
            "",
            _verification_md(data.apply, data.summary["baseline"]["knobs"]),
        ]
    if data.bank is not None:
        out += _md_section("Experience bank", *bank_lines(data), BANK_HEADER)
    if data.proposals:
        out += _md_section("Patches written by the LLM", *proposal_lines(data), PROPOSAL_HEADER)
    out += ["", "## Figures", ""]
    for name in data.figures:
        out += [
            f"### {CAPTIONS.get(name, name)}",
            "",
            f"![{CAPTIONS.get(name, name)}]({figure_dir}/{name})",
            "",
        ]
    out += ["## Every trial", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in trial_rows(data)]
    return "\n".join(out) + "\n"


def _verification_md(a, base: dict) -> str:
    rows = [
        f"{a.decision}",
        "",
        f"Compared: {a.compared}; {a.rounds} rounds; {a.method}.",
        "",
        *([f"Evidence: {a.evidence}.", ""] if a.evidence else []),
        "| candidate | knobs changed | patches | speed-up | interval | checks | promoted |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in a.candidates:
        knobs, patches = _changes(c, base)
        rows.append(
            f"| {c.label} | {knobs} | {patches} | {_x(c.speedup)} | "
            f"[{_b(c.ci_low)}, {_b(c.ci_high)}] | "
            f"{'passed' if c.verified else '; '.join(c.reasons[:1]) or 'failed'} | "
            f"{'yes' if c.promoted else 'no'} |"
        )
    return "\n".join(rows)


STYLE = (
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
    "padding:2px 6px}th{background:#f3f3f3}img{max-width:100%}.fail{color:#b00}"
)


def html_report(data) -> str:
    """``report.html``: one file, figures embedded."""
    e = html.escape
    s = data.summary
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>InfraRSI report: "
        f"{e(s['workload'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>InfraRSI report: {e(s['workload'])}</h1>",
    ]
    steps = next_steps(data)
    if steps:
        parts.append("<h2>What to do now</h2><pre>" + e("\n".join(steps)) + "</pre>")
    parts.append("<h2>Summary</h2><ul>")
    parts += [f"<li>{e(line)}</li>" for line in headline(s)]
    parts.append("</ul>")
    if data.apply is not None:
        parts += _html_verification(data.apply, s["baseline"]["knobs"])
    if data.bank is not None:
        intro, rows = bank_lines(data)
        parts.append(f"<h2>Experience bank</h2><p>{e(intro)}</p>")
        parts.append(_table(BANK_HEADER, rows))
    if data.proposals:
        intro, rows = proposal_lines(data)
        parts.append(f"<h2>Patches written by the LLM</h2><p>{e(intro)}</p>")
        parts.append(_table(PROPOSAL_HEADER, rows))
    parts.append("<h2>Figures</h2>")
    for name, png in data.figures.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode()
        caption = e(CAPTIONS.get(name, name))
        parts.append(
            f"<figure><img class='figure' alt='{caption}' src='{uri}'>"
            f"<figcaption>{caption}</figcaption></figure>"
        )
    parts.append("<h2>Every trial</h2>")
    parts.append(_table(HEADER, trial_rows(data)))
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_verification(a, baseline_knobs: dict) -> list[str]:
    """The verification section: Apply's decision and how it compared, then each candidate."""
    e = html.escape
    header = ["candidate", "knobs changed", "patches", "speed-up", "interval", "checks"]
    rows = [
        [
            c.label,
            *_changes(c, baseline_knobs),
            _x(c.speedup),
            f"[{_b(c.ci_low)}, {_b(c.ci_high)}]",
            "passed" if c.verified else "; ".join(c.reasons[:1]) or "failed",
            "yes" if c.promoted else "no",
        ]
        for c in a.candidates
    ]
    return [
        f"<h2>Verification</h2><p>{e(a.decision)}</p><p>Compared: "
        f"{e(a.compared)}; {a.rounds} rounds; {e(a.method)}.</p>"
        + (f"<p>Evidence: {e(a.evidence)}.</p>" if a.evidence else ""),
        _table([*header, "promoted"], rows),
    ]


def _table(header: list[str], rows: list[list[str]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=fail' if c in FAILED else ''}>{e(c)}</td>" for c in row)
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
