"""The short text summary of bench/gpu_check.py's JSON: a few lines per section, the figures
docs/performance-gpu.md takes. Reads only what the steps wrote; a missing figure
prints as "-" (a step that failed, timed out or was skipped says so in its own line)."""

from __future__ import annotations


def _f(x, fmt="%.2f"):
    return fmt % x if isinstance(x, (int, float)) else "-"


def _parity(sec):
    lines = []
    cr = sec.get("cuda_ranks", {}).get("data")
    if cr:
        lines.append(
            "  C++ *CudaRanks*: %d tests, %d passed, %d skipped, failed: %s"
            % (cr["tests"], cr["passed"], cr["skipped"], ", ".join(cr["failed"]) or "none")
        )
    hf = sec.get("hf", {}).get("data")
    for c in (hf or {}).get("cases", []):
        lines.append(
            "  hf.enable %s %s%s: %s, outputs %s, grads %s (tolerance %s)"
            % (
                c.get("family"),
                c.get("dtype"),
                " split" if c.get("split") else "",
                "ok" if c.get("ok") else "FAILED " + str(c.get("error", "")),
                _f(c.get("out_diff"), "%.1e"),
                _f(c.get("grad_diff"), "%.1e"),
                _f(c.get("tolerance"), "%.0e"),
            )
        )
    return lines


def _tower_speed(sec):
    lines = []
    for dtype, rec in sec.items():
        data = rec.get("data") or {}
        for fam, f in data.get("families", {}).items():
            lines.append(
                "  %s %s on %s: frameshard / hf-sdpa forward %s, forward+backward %s"
                % (
                    fam,
                    dtype,
                    data.get("device"),
                    _f(f.get("forward_ratio_vs_hf_sdpa")),
                    _f(f.get("forward_backward_ratio_vs_hf_sdpa")),
                )
            )
    return lines


def _calibrate(sec):
    lines = []
    for dtype, rec in sec.items():
        d = rec.get("data")
        if not d:
            continue
        chk = d.get("check", {})
        lines.append(
            "  %s: a=%s b=%s c=%s per call %s ms, fit max error %s; check: per-rank error "
            "max %s, calibrated plan not worse in %s of %s"
            % (
                dtype,
                _f(d["a"], "%.3g"),
                _f(d["b"], "%.3g"),
                _f(d["c"], "%.3g"),
                _f(d["per_call_s"] * 1e3),
                _f(d["fit_max_error"] * 100, "%.1f%%"),
                _f(chk.get("max_abs_error", float("nan")) * 100, "%.1f%%"),
                chk.get("plans_not_worse", "-"),
                chk.get("plans", "-"),
            )
        )
    return lines


def _shares(sec):
    """Per batch and CP: the predicted speed-up of each arm (FLOP model; calibrated optimal), and
    the online arm's curve where the step learned one."""
    lines = []
    for dtype, rec in sec.items():
        d = rec.get("data")
        if not d:
            continue
        for b in d.get("batches", []):
            lines.append("  %s, %s: replicated %s ms" % (dtype, b["label"], _f(b["replicated_s"] * 1e3)))
            for at in b["cps"]:
                sp = {(x["arm"], x["cost"]): x["speedup"] for x in at["arms"]}
                lines.append(
                    "    cp %d speed-up: optimal %s greedy %s count %s lpt %s split %s | calibrated "
                    "optimal %s split %s"
                    % (
                        at["cp"],
                        *(_f(sp.get((arm, "flop"))) for arm in ("optimal", "greedy", "count", "lpt", "split")),
                        _f(sp.get(("optimal", "calibrated"))),
                        _f(sp.get(("split", "calibrated"))),
                    )
                )
                online = [x for x in at["arms"] if x["cost"] == "online"]
                for x in online:  # scale_sim --online-rounds: learned from these shares' times
                    lines.append(
                        "    cp %d online split %s, slowest / ideal by round: %s; %s"
                        % (at["cp"], _f(x["speedup"]), " ".join("%.2f" % c for c in x["curve_over_ideal"]), x["fit"])
                    )
    return lines


def summarize(result):
    m = result.get("machine", {})
    out = [
        "gpu check (%s): %s, torch %s, transformers %s, %s CPUs; steps %.0f s"
        % (
            result["mode"],
            m.get("gpu") or "no GPU",
            m.get("torch"),
            m.get("transformers"),
            m.get("cpus"),
            result.get("seconds", 0),
        )
    ]
    for step, t in (result.get("build") or {}).items():
        out.append("  build %s: %s s" % (step, t))
    for s in result["steps"]:
        out.append("  %-22s %-8s %6.1f s (budget %d s)" % (s["step"], s["status"], s["seconds"], s["budget_s"]))
    for name, fn in (
        ("parity", _parity),
        ("tower_speed", _tower_speed),
        ("calibrate", _calibrate),
        ("rank_shares", _shares),
        ("split", _shares),
    ):
        out.append(name + ":")
        out.extend(fn(result.get(name, {})) or ["  (no figures)"])
    return "\n".join(out) + "\n"
