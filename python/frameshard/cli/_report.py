"""The reports of `python -m frameshard train|ab` (frameshard.cli._ab): one arm's JSON object
from its ranks' series, the ratios sharded / replicated and the summary table. Pure."""

from __future__ import annotations


def _mean(values: list) -> float:
    rest = values[1:] if len(values) > 1 else values  # step 0 is the warm-up
    return sum(rest) / len(rest) if rest else 0.0


def summarize(ranks: list[dict], sharded: bool, dedup: bool = False, dp: int = 1, pooled: bool = False) -> dict:
    """One arm's JSON object (the C++ commands' names): per step the slowest rank's times. `ranks`
    in rank order, replica-major (rank = replica * cp + cp rank); the frame and row counts are the
    job's (summed over the dp replicas, as the C++ commands count them). `pooled`: the frames
    were balanced over the whole dp x cp mesh (mesh_dims [dp, cp])."""
    steps, cp = len(ranks[0]["losses"]), len(ranks) // dp
    replicas = ranks[::cp]  # each replica's first CP rank (its CP ranks see the same batch)
    step_s = [max(r["step_seconds"][i] for r in ranks) for i in range(steps)]
    vision_s = [max(r["vision_seconds"][i] for r in ranks) for i in range(steps)]
    row_bytes = ranks[0]["visual_row_bytes"]
    # The all-gather hands every rank every visual row of its replica (with dedup, every
    # distinct one); the replicated arm gathers nothing.
    gathers = sharded and (cp > 1 or pooled)
    rows = "distinct_visual_rows" if sharded and dedup else "visual_rows"
    if sharded and "routed_rows" in ranks[0]:  # gather owner: each rank got its tokens' rows only
        rows = "routed_rows"
    received = [[r[rows][i] * row_bytes if gathers else 0 for r in ranks] for i in range(steps)]

    def job(key: str) -> list:
        return [sum(r[key][i] for r in replicas) for i in range(steps)]

    frames, distinct = job("frames"), job("distinct_frames")
    return {
        "cp": cp,
        "dp": dp,
        "frame_sharding": sharded,
        "losses": ranks[0]["losses"],
        "step_seconds": step_s,
        "vision_seconds": vision_s,
        "vision_seconds_per_rank": [[r["vision_seconds"][i] for r in ranks] for i in range(steps)],
        "mean_step_seconds": _mean(step_s),
        "mean_vision_seconds": _mean(vision_s),
        "measured_steps": max(1, steps - 1),
        "peak_bytes_per_rank": [r["peak_bytes"] for r in ranks],
        "max_peak_bytes": max(r["peak_bytes"] for r in ranks),
        "vision_peak_bytes_per_rank": [r["vision_peak_bytes"] for r in ranks],
        "max_vision_peak_bytes": max(r["vision_peak_bytes"] for r in ranks),
        "visual_bytes_received": received,
        "visual_rows": job("visual_rows"),
        "visual_rows_per_replica": [[r["visual_rows"][i] for r in replicas] for i in range(steps)],
        "visual_row_bytes": row_bytes,
        "dedup": sharded and dedup,
        # the C++ names (frames_total, ...) and the earlier Python ones (frames, ...)
        "frames_total": frames,
        "frames_distinct": distinct,
        "rows_total": job("visual_rows"),
        "rows_distinct": job("distinct_visual_rows"),
        "frames": frames,
        "distinct_frames": distinct,
        "distinct_visual_rows": job("distinct_visual_rows"),
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def compare(rep: dict, sh: dict) -> dict:
    """The ratios sharded / replicated and the arms' largest loss difference."""
    # per step the largest replica's rows: what one rank of the all-gather receives
    all_rows = sum(max(step) for step in sh["visual_rows_per_replica"]) * sh["visual_row_bytes"]
    got = sum(max(step) for step in sh["visual_bytes_received"])
    return {
        "vision_time_ratio": _ratio(sh["mean_vision_seconds"], rep["mean_vision_seconds"]),
        "step_time_ratio": _ratio(sh["mean_step_seconds"], rep["mean_step_seconds"]),
        "peak_bytes_ratio": _ratio(sh["max_peak_bytes"], rep["max_peak_bytes"]),
        "vision_peak_bytes_ratio": _ratio(sh["max_vision_peak_bytes"], rep["max_vision_peak_bytes"]),
        "loss_max_abs_diff": max(abs(a - b) for a, b in zip(rep["losses"], sh["losses"], strict=False)),
        # received by the sharded arm's largest rank / every visual row's bytes: 1 for the
        # all-gather, about 1/CP for the owner-routed gather.
        "visual_bytes_ratio": _ratio(got, all_rows),
    }


def _mib(b: float) -> str:
    return "%.1f MiB" % (b / 2**20)


def table(arms: dict, ratios: dict | None) -> str:
    """The summary table: one column per arm (and the ratio)."""
    rows = [
        ("vision time (mean)", lambda a: "%.4f s" % a["mean_vision_seconds"], "vision_time_ratio"),
        ("step time (mean)", lambda a: "%.4f s" % a["mean_step_seconds"], "step_time_ratio"),
        ("peak bytes (largest rank)", lambda a: _mib(a["max_peak_bytes"]), "peak_bytes_ratio"),
        ("vision peak bytes", lambda a: _mib(a["max_vision_peak_bytes"]), "vision_peak_bytes_ratio"),
        ("visual bytes in (step 0)", lambda a: _mib(max(a["visual_bytes_received"][0])), "visual_bytes_ratio"),
        ("final loss", lambda a: "%.6f" % a["losses"][-1], "loss_max_abs_diff"),
        (
            "frames distinct/total",
            lambda a: "%d/%d%s" % (sum(a["distinct_frames"]), sum(a["frames"]), " dedup" if a["dedup"] else ""),
            None,
        ),
    ]
    names = list(arms)
    head = "%-26s" % "" + "".join("%16s" % n for n in names) + ("%16s" % "sharded/repl." if ratios else "")
    lines = [head]
    for label, cell, key in rows:
        line = "%-26s" % label + "".join("%16s" % cell(arms[n]) for n in names)
        if ratios:
            v = ratios.get(key) if key else None
            line += "%16s" % ("-" if v is None else ("%.3g" % v))
        lines.append(line)
    return "\n".join(lines)
