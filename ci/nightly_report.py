"""Report of a nightly GPU run: markdown with every check's verdict and statistics, the sanitizer and
benchmark results, and PNG plots (matplotlib optional: without it the report says there are none).

    python ci/nightly_report.py RESULTS_DIR [--elapsed SECONDS] [--copies N]

Reads RESULTS_DIR/{suite.json, steps.tsv, env.txt, mutants.log, sanitizer-*.log, bench.json, bench.md,
rates.md, flashinfer.json} (whatever exists) and writes RESULTS_DIR/report.md and RESULTS_DIR/*.png. The
distribution plots come from a fresh launch of the Triton backend on the statistical cases (--copies replicated requests).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # optional extra
    plt = None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _fmt(x, spec: str) -> str:
    if x is None or (isinstance(x, str) and x in ("nan", "inf")):
        return "-" if x is None else x
    return format(x, spec)


VERDICTS = {"pass": "PASS", "fail": "**FAIL**", "n/a": "n/a", "not run": "not run", "known deviation": "KNOWN"}


def suite_section(doc: dict) -> list[str]:
    results = doc["results"]
    counts = {s: sum(r["status"] == s for r in results) for s in ("pass", "fail", "n/a")}
    lines = [f"Backend `{doc['backend']}`, profile `{doc['profile']}`, device {doc['device']}. "
             f"**{'PASSED' if doc['passed'] else 'FAILED'}**: {counts['pass']} passed, {counts['fail']} failed, "
             f"{counts['n/a']} not applicable ({_runner(doc)}, {doc['seconds']:.0f} s).", "",
             f"Error budget: family-wise false-alarm rate {doc['family_alpha']:g} per run, Bonferroni over the "
             f"statistical checks (alpha {doc['check_alpha']:.2g} each); exact and structural checks have no false "
             "alarms. det99 = smallest deviation detected with probability 0.99 at that alpha, at the worst position "
             "tested: tv (total-variation distance), acceptance (acceptance-probability shift) or rate (shift of the "
             "mean joint acceptance rate).", "",
             "| check | case | kind | verdict | statistic | p | alpha | n | det99 | s | notes |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        note = (r.get("message") or "").replace("|", "/").replace("\n", " ")
        if len(note) > 160:
            note = note[:157] + "..."
        verdict = VERDICTS.get(r["status"], r["status"])
        power = _fmt(r.get("detectable"), ".4f") + (f" {r['detectable_measure']}" if r.get("detectable_measure") else "")
        lines.append(f"| {r['check']} | {r['case']} | {r['kind']} | {verdict} | {_fmt(r.get('statistic'), '.4g')} | "
                     f"{_fmt(r.get('p_value'), '.3g')} | {_fmt(r.get('alpha'), '.2g')} | {r.get('samples', 0)} | "
                     f"{power} | {r.get('seconds', 0):.1f} | {note} |")
    tvs = [r for r in results if r["check"] == "token_distribution" and isinstance(r.get("detectable"), float)]
    if tvs:
        worst = max(tvs, key=lambda r: r["detectable"])
        lines += ["", f"Power of token_distribution at the worst position of each case: det99 between "
                      f"{min(r['detectable'] for r in tvs):.4f} and {worst['detectable']:.4f} (TV distance; "
                      f"{worst['samples']:,} samples at position 0)."]
    lines += gpu_lines(results)
    if doc.get("verdict"):
        lines += ["", "Verdict reasons: " + ("; ".join(doc["verdict"]["reasons"]) or "none")]
    return lines


THIRD_PARTY = ("flashinfer",)     # the nightly's adapter steps, each writing NAME.json


def third_party_section(name: str, doc: dict) -> list[str]:
    """A third-party kernel's check through its adapter (``specverify check ADAPTER --json``): its verdict, its
    declared deviations as met or not met in this run, and its failures."""
    results, verdict = doc["results"], doc.get("verdict") or {}
    counts = {s: sum(r["status"] == s for r in results) for s in VERDICTS}
    lines = [f"`{name}`: backend `{doc['backend']}`, profile `{doc['profile']}`, device {doc['device']}. "
             f"**{'PASSED' if doc['passed'] else 'FAILED'}**: {counts['pass']} passed, {counts['fail']} failed, "
             f"{counts['n/a']} not applicable, {counts['known deviation']} known deviation(s) "
             f"({doc.get('seconds', 0):.0f} s)."]
    for title, key in (("Known deviations (declared; never counted as passed)", "known_deviations"),
                       ("Intermittent deviations this run did not meet (kept)", "intermittent_not_seen"),
                       ("Declared deviations that did not occur (remove them)", "deviations_not_seen")):
        if verdict.get(key):
            lines += ["", f"{title}:"] + [f"- `{cid}`: {why}" for cid, why in verdict[key].items()]
    failed = [r for r in results if r["status"] == "fail"]
    if failed:
        lines += ["", "Failures:"] + [f"- `{r['check']}[{r['case']}]`: {(r.get('message') or '')[:300]}"
                                      for r in failed]
    return lines


def _runner(doc: dict) -> str:
    """Which face ran the suite: pytest (the plugin's report has its exit status) or the check pool."""
    if "pytest_exitstatus" in doc:
        return f"pytest exit status {doc['pytest_exitstatus']}"
    gpus = doc.get("gpus") or []
    return f"check pool, {doc.get('workers', '?')} workers" + (f" pinned to GPU(s) {', '.join(gpus)}" if gpus else "")


def gpu_lines(results: list) -> list[str]:
    """How the checks used the GPUs: checks per GPU (a split draw counts on each of its GPUs), and each draw split
    over GPUs with its parts' copies."""
    per_gpu: dict[str, int] = {}
    for r in results:
        for g in (r.get("gpu") or "").split(","):
            if g:
                per_gpu[g] = per_gpu.get(g, 0) + 1
    if not per_gpu:
        return []
    lines = ["", "Checks run per GPU: " + ", ".join(f"GPU {g}: {n}" for g, n in sorted(per_gpu.items())) + "."]
    split = [r for r in results if (r.get("sampling") or {}).get("parts", 1) > 1]
    for r in split:
        s = r["sampling"]
        steady = s.get("steady_samples_per_second")
        lines.append(f"- `{r['check']}[{r['case']}]`: {s['parts']} parts on GPUs {r.get('gpu')}, copies "
                     + " + ".join(f"{c:,}" for c in s.get("part_copies", [])) + f" = {s.get('copies', 0):,} in "
                     f"{r.get('seconds', 0):.1f} s" + ("" if steady is None else f" ({steady:,.0f} samples/s summed)"))
    if not split:
        lines.append("No draw was split over GPUs (one GPU, or the pytest runner).")
    return lines


def power_section(results: list) -> list[str]:
    """Each statistical check's sampling (SPEC 5): copies, samples/s, the backend's share of the time, det99
    by position, and for token_distribution whether every position met the plan's target (target_tv)."""
    rows = [r for r in results if r.get("sampling") and r.get("detectable_by_position")]
    if not rows:
        return ["No statistical check recorded its sampling."]
    lines = ["| check | case | copies | samples/s | after the first launch | backend share | det99 by position | "
             "target met |", "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    short = []
    for r in rows:
        s, det = r["sampling"], [float(x) for x in r["detectable_by_position"]]
        met = ""
        if r["check"] == "token_distribution" and s.get("target_tv"):
            misses = [(j, d, t) for j, (d, t) in enumerate(zip(det, s["target_tv"])) if not d <= t]
            met = "yes" if not misses else "**no**: " + ", ".join(f"position {j} {d:.4f} > {t:g}" for j, d, t in misses)
            if misses:
                short.append(f"{r['case']}" + (f" ({s['budget_cut']})" if s.get("budget_cut") else ""))
        steady = s.get("steady_samples_per_second")
        lines.append(f"| {r['check']} | {r['case']} | {s.get('copies', 0):,} | {s.get('samples_per_second') or 0:,.0f} | "
                     f"{'-' if steady is None else f'{steady:,.0f}'} | {s.get('backend_share') or 0:.2f} | {', '.join(f'{d:.4f}' for d in det)} "
                     f"{r.get('detectable_measure') or ''} | {met} |")
    speeds = [r["sampling"].get("samples_per_second") or 0 for r in rows]
    lines += ["", f"Samples/s per check: {min(speeds):,.0f} to {max(speeds):,.0f} (each check shares the GPU with the "
                  "other workers' checks; the first launch of a case compiles its kernels in the worker, and the "
                  "next column leaves it out). token_distribution cases short of their det99 target: "
              + ("; ".join(short) if short else "none") + "."]
    return lines


def sample_plots(out_dir: str, copies: int) -> tuple[list[str], list[str]]:
    """Fresh launches of the Triton backend; returns (markdown lines, png names)."""
    from dataclasses import replace

    from specverify.checks.cases import STAT_CASE_BY_NAME
    from specverify.checks.statistical import sample_case
    from specverify.kernels.triton_sampler import TritonBackend
    from specverify.strategies import get_profile

    profile = replace(get_profile("nightly"), stat_copies=copies)
    backend = TritonBackend()
    lines, pngs = [], []
    # token distribution at position 0, and acceptance by position, for the dense drafter
    dense = STAT_CASE_BY_NAME["dense_q"]
    tally, _, _ = sample_case(backend, dense, profile, "plots")
    V = dense.vocab_size
    emp = tally.tokens()[0].double() / tally.samples
    expected = dense.position_distributions[0]
    tv = 0.5 * float((emp - expected).abs().sum())
    lines += [f"Token at position 0, case `dense_q` ({copies:,} requests, seeded Philox noise): observed TV "
              f"distance to the exact distribution {tv:.5f}.", "",
              "| token | " + " | ".join(str(v) for v in range(V)) + " |",
              "| --- |" + " ---: |" * V,
              "| exact | " + " | ".join(f"{float(x):.4f}" for x in expected) + " |",
              "| observed | " + " | ".join(f"{float(x):.4f}" for x in emp) + " |", ""]
    acc_rows = []
    for case_name in ("dense_q", "synthetic_rate"):
        case = STAT_CASE_BY_NAME[case_name]
        if case_name != "dense_q":
            tally, _, _ = sample_case(backend, case, profile, "plots")
        theory = case.acceptance_by_position
        observed = [tally.reached(j + 1) / max(1, tally.reached(j)) for j in range(case.k)]
        acc_rows.append((case_name, [float(t) for t in theory], observed))
        lines.append(f"Acceptance by position, `{case_name}` ({case.method}): " + "; ".join(
            f"j={j}: {o:.4f} vs {float(t):.4f}" for j, (o, t) in enumerate(zip(observed, theory))))
    lines.append("")
    if plt is None:
        return lines, pngs
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(V)
    ax.bar([v - 0.2 for v in x], expected.tolist(), width=0.4, label="exact p_0")
    ax.bar([v + 0.2 for v in x], emp.tolist(), width=0.4, label=f"Triton, {copies:,} samples")
    ax.set_xlabel("token id")
    ax.set_ylabel("probability")
    ax.set_title(f"Emitted token at position 0 (dense_q): TV {tv:.5f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "token_distribution.png"), dpi=110)
    plt.close(fig)
    pngs.append("token_distribution.png")
    fig, axes = plt.subplots(1, len(acc_rows), figsize=(10, 3.5))
    for ax, (name, theory, observed) in zip(axes, acc_rows):
        js = range(len(theory))
        ax.plot(js, theory, "o-", label="theory")
        ax.plot(js, observed, "x--", label="Triton")
        ax.set_xticks(list(js))
        ax.set_xlabel("draft position j")
        ax.set_ylabel("P(accept j | reached j)")
        ax.set_title(name)
        ax.set_ylim(0, 1.05)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "acceptance_by_position.png"), dpi=110)
    plt.close(fig)
    pngs.append("acceptance_by_position.png")
    return lines, pngs


def bench_plot(out_dir: str, bench: dict) -> list[str]:
    if plt is None or not bench.get("rows"):
        return []
    rows = bench["rows"]
    labels = [f"B={r['B']}\nV={r['V']}\n{r['dtype']}" for r in rows]
    series = [("fused inj", "fused_inj_us"), ("fused seeded", "fused_seed_us"), ("graph", "graph_us"),
              ("baseline", "baseline_us")]
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows)), 4))
    width = 0.8 / len(series)
    for i, (name, key) in enumerate(series):
        vals = [r[key] if isinstance(r[key], (int, float)) and math.isfinite(r[key]) else 0 for r in rows]
        ax.bar([x + (i - 1.5) * width for x in range(len(rows))], vals, width=width, label=name)
    for x, r in enumerate(rows):
        ax.hlines(r["floor_inj_us"], x - 0.45, x + 0.45, colors="k", linestyles="--",
                  label="bandwidth floor (inj)" if x == 0 else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("microseconds per call (log)")
    ax.set_title(f"Fused Triton sampler vs baseline vs floor ({bench['copy_bandwidth'] / 1e12:.2f} TB/s copy)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "benchmark.png"), dpi=110)
    plt.close(fig)
    return ["benchmark.png"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--elapsed", type=float, default=None, help="seconds the nightly script ran before the report")
    ap.add_argument("--copies", type=int, default=1_000_000, help="requests per plotted case")
    args = ap.parse_args()
    d = args.results
    t0 = time.perf_counter()
    lines = [f"# Nightly GPU run, {datetime.date.today().isoformat()}", ""]
    env = _read(os.path.join(d, "env.txt"))
    if env:
        lines += ["## Environment", "", "```", env.strip(), "```", ""]
    lines += ["Command: `ci/nightly_gpu.sh RESULTS_DIR` (see the script's header)."]
    log = _read(os.path.join(d, "nightly.log")) or ""
    lines += [line.strip() + "." for line in log.splitlines() if line.startswith("GPUs: ")][:1]
    if args.elapsed is not None:
        lines.append(f"Wall time of the script before this report: {args.elapsed:.0f} s.")
    steps = _read(os.path.join(d, "steps.tsv"))
    rows = [line.split("\t") for line in steps.strip().splitlines()[1:]] if steps else []
    if rows:
        lines += ["", "| step | status | seconds |", "| --- | --- | ---: |"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    # a step left out on purpose (ci/nightly_gpu.sh's STEPS) is reported as such, not as a failure
    left_out = {a for a, b, _ in rows if b.startswith("not run")}
    if left_out:
        lines += ["", "**A partial run:** not run here: " + ", ".join(sorted(left_out)) + "."]
    lines.append("")
    failed = False

    lines += ["## Conformance suite (nightly profile, Triton on CUDA)", ""]
    suite = _read(os.path.join(d, "suite.json"))
    if suite:
        doc = json.loads(suite)
        failed |= not doc["passed"]
        lines += suite_section(doc)
    elif "suite" in left_out:
        lines.append("The suite was not run in this call (STEPS).")
    else:
        lines.append("No suite.json: the suite did not run to the end (see suite.log).")
        failed = True
    lines.append("")

    lines += ["## Statistical power and speed", ""]
    lines += power_section(json.loads(suite)["results"]) if suite else ["No suite.json."]
    lines.append("")
    rates = _read(os.path.join(d, "rates.md"))
    lines += ["### Each case alone (ci/sampling_rates.py)", "",
              rates.strip() if rates else "No rates table (see rates.log).", ""]

    lines += ["## CUDA graphs", ""]
    if suite:
        for r in json.loads(suite)["results"]:
            if r["check"] == "cuda_graphs":
                lines.append(f"Correct backend: `cuda_graphs[{r['case']}]` **{r['status']}**: {r['message']}")
    mut = _read(os.path.join(d, "mutants.log")) or ""
    caught = [line.strip() for line in mut.splitlines() if "caught by" in line]
    summary = [line.strip() for line in mut.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    lines.append("")
    lines.append("GPU-only mutant (`stale_draft_probs_graph`: draft probabilities copied into a private buffer only "
                 "outside capture, so replays read stale draft state): "
                 + ("; ".join(caught) if caught else "no catch line recorded")
                 + (f" (pytest: {summary[-1]})" if summary else ""))
    lines.append("")

    lines += ["## Third-party kernels", ""]
    adapters = [(name, _read(os.path.join(d, f"{name}.json"))) for name in THIRD_PARTY]
    for name, text in adapters:
        if text:
            lines += third_party_section(name, json.loads(text)) + [""]
    if not any(text for _, text in adapters):
        lines += ["None checked in this run (FlashInfer not importable, or its step not run).", ""]

    lines += ["## compute-sanitizer", "", "`ci/sanitizer_driver.py`: every kernel path (standard, greedy, mixed, "
              "synthetic; injected and seeded; fp32, bf16, fp16; V not a multiple of the block; zero-draft requests; "
              "B = 0 and 1; forced split-V plans; the seeded-noise and -log kernels).", "",
              "| tool | summary |", "| --- | --- |"]
    for tool in ("memcheck", "initcheck", "racecheck"):
        log = _read(os.path.join(d, f"sanitizer-{tool}.log"))
        if log is None:
            lines.append(f"| {tool} | not run |")
            continue
        # a run in parts (sanitizer_driver.py --parts) has a summary per part: each is shown
        summ = [line.replace("=========", "").strip() for line in log.splitlines() if "SUMMARY" in line]
        lines.append(f"| {tool} | {'; '.join(summ) if summ else 'no summary line (see log)'} |")
    lines.append("")

    pngs = []
    lines += ["## Sampled distributions (Triton, CUDA)", ""]
    try:
        sample_lines, sample_pngs = sample_plots(d, args.copies)
        lines += sample_lines
        pngs += sample_pngs
    except Exception as exc:  # noqa: BLE001 - the report must still be written
        lines += [f"Sampling for the plots failed: {type(exc).__name__}: {exc}", ""]
        failed = True

    lines += ["## Benchmark (ci/bench_gpu.py)", ""]
    bench_md = _read(os.path.join(d, "bench.md"))
    bench_json = _read(os.path.join(d, "bench.json"))
    lines.append(bench_md.strip() if bench_md else "No benchmark table (see bench.log).")
    if bench_json:
        try:
            pngs += bench_plot(d, json.loads(bench_json))
        except Exception as exc:  # noqa: BLE001
            lines.append(f"\nBenchmark plot failed: {type(exc).__name__}: {exc}")
    lines.append("")

    lines += ["## Plots", ""]
    if plt is None:
        lines.append("matplotlib is not installed: no pictures (the numbers above carry the same content).")
    else:
        lines += [f"![{p[:-4]}]({p})" for p in pngs]
    lines += ["", f"Report written in {time.perf_counter() - t0:.0f} s."]
    with open(os.path.join(d, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"report: {os.path.join(d, 'report.md')}, {len(pngs)} plot(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
