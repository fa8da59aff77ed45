"""Peak memory and step time per rank of TRL's SFTTrainer on one long sample, without CP and
with frameshard's CP (frameshard.integrations.trl.enable(trainer, config, cp_size=C)).

    PYTHONPATH=build/python-dev .venv/bin/python bench/trl_sft_cp_memory.py \\
        [--cps 1,2,4] [--pages 16] [--text 12000] [--hidden 512] [--layers 4] [--steps 2] [--checkpointing] \\
        [--mmap-threshold MIB]

The sample: one conversation of `--pages` page images (128 x 128 pixels: 1024 patch rows, 256
visual tokens each on the tiny Qwen2-VL's patch 4 and merge 2) and `--text` characters (one token
each), about 16.4K tokens by default. The model: examples/python/trl_grpo.py's tiny Qwen2-VL with
its language model scaled to `--hidden` / `--layers` (2 heads, ffn 2.75 x hidden). For each CP
size, C spawned Gloo processes (one thread each) train `--steps` steps of that one sample (dp 1).
Per run: the largest rank's peak RSS (the process's VmHWM), its RSS before training and the
difference (what training added: activations, gradients, temporaries), the peak of the bytes
malloc has handed out and not had back ("live": glibc's mallinfo2, sampled every 2 ms during
training: the memory the run needs, whatever the allocator keeps), and the mean step time (steps
after the first), each also as a ratio of CP 1's.

Why both: glibc raises its mmap threshold (up to 32 MiB) as large blocks are freed, so the blocks
under it come from the heap, where a freed hole is not given back to the system. At CP 2 and 4
the per-rank activations (8K x 1024 floats: 32 MiB) fall under it, at CP 1 not; the resident peak
then exceeds the live one by the heap's holes. `--mmap-threshold MIB` sets MALLOC_MMAP_THRESHOLD_
in the ranks (a fixed threshold: larger blocks are always mapped and unmapped on free).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class _LivePeak:
    """The peak of malloc's live bytes (in-use heap chunks plus mapped blocks), sampled."""

    def __init__(self) -> None:
        import ctypes

        class Info(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks "
                        "uordblks fordblks keepcost".split()]  # fmt: skip

        self.mallinfo2_ = ctypes.CDLL("libc.so.6").mallinfo2
        self.mallinfo2_.restype = Info
        self.peak_, self.stop_ = 0.0, threading.Event()
        self.thread_ = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        info = self.mallinfo2_()
        return (info.uordblks + info.hblkhd) / 2**20

    def _run(self) -> None:
        while not self.stop_.wait(0.002):
            self.peak_ = max(self.peak_, self.now())

    def __enter__(self) -> _LivePeak:
        self.peak_ = self.now()
        self.thread_.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_.set()
        self.thread_.join()


def _sample(pages: int, text: int):
    import datasets
    from PIL import Image

    images = [Image.new("RGB", (128, 128), (17 * i % 256, 101 * i % 256, 29 * i % 256)) for i in range(pages)]
    words = ("page %d says something long about shapes. " * (1 + text // 40))[:text]
    user = [{"type": "image"} for _ in images] + [{"type": "text", "text": "Summarise these pages."}]
    answer = [{"type": "text", "text": words}]
    row = {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], "images": images}
    return datasets.Dataset.from_list([row])


def _saved_mib(trainer) -> float:  # noqa: ANN001
    """MiB of the tensors autograd saves for the backward in one forward of the first batch (each
    storage once): the activations the model holds, without the backward's transients."""
    import torch

    batch = next(iter(trainer.get_train_dataloader()))
    seen = {}

    def pack(x: torch.Tensor) -> torch.Tensor:
        storage = x.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        trainer.model(**batch)
    return sum(seen.values()) / 2**20


def rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(RANK=str(args.rank), WORLD_SIZE=str(args.cp), LOCAL_RANK=str(args.rank))
    os.environ.update(LOCAL_WORLD_SIZE=str(args.cp), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.cp)
    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    import transformers
    import trl
    import trl_grpo

    import frameshard
    from frameshard.integrations import trl as fs_trl

    model = trl_grpo.tiny_qwen2_vl(hidden=args.hidden)
    text = model.config.text_config
    text.num_hidden_layers = args.layers  # 2 heads, 1 KV head: the tiny model's M-RoPE sections
    text.layer_types = ["full_attention"] * args.layers
    text.intermediate_size = int(2.75 * args.hidden) // 64 * 64
    torch.manual_seed(0)
    model = transformers.Qwen2VLForConditionalGeneration._from_config(model.config, attn_implementation="sdpa")
    processor = trl_grpo.tiny_processor(max_pixels=128 * 128)
    processor.tokenizer.padding_side = "right"
    config = trl.SFTConfig(
        output_dir=args.out, use_cpu=True, bf16=False, per_device_train_batch_size=1, max_steps=args.steps,
        max_length=None, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        gradient_checkpointing=args.checkpointing, optim="sgd", learning_rate=1e-3,
    )  # fmt: skip
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=_sample(args.pages, args.text),
                             processing_class=processor)  # fmt: skip
    sharding = frameshard.FrameShardingConfig(enabled=True, gather="owner", min_tokens=0, min_frames=0)
    fs_trl.enable(trainer, sharding, cp_size=args.cp)
    times = []
    trainer.add_callback(type("Clock", (transformers.TrainerCallback,), {
        "on_step_begin": lambda self, *a, **k: times.append(time.monotonic()),
        "on_step_end": lambda self, *a, **k: times.append(time.monotonic()),
    })())  # fmt: skip
    before = _rss_mib("VmRSS")
    saved = _saved_mib(trainer) if args.saved else float("nan")
    with _LivePeak() as live:
        if not args.saved:
            trainer.train()
    peak = _rss_mib("VmHWM")
    tokens = int(trainer.state.log_history[0].get("num_tokens", 0)) if trainer.state.log_history else 0
    steps = [b - a for a, b in zip(times[0::2], times[1::2], strict=True)]
    record = dict(
        rank=args.rank, before=before, peak=peak, live=live.peak_, tokens=tokens, steps=steps or [0.0], saved=saved
    )
    with open(os.path.join(args.out, "rank%d.json" % args.rank), "w") as f:
        json.dump(record, f)
    fs_trl.disable(trainer)
    frameshard.shut_down()


def run(cp: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as out:
        port = 29600 + cp
        extra = ["--pages", str(args.pages), "--text", str(args.text), "--hidden", str(args.hidden)]
        extra += ["--layers", str(args.layers), "--steps", str(args.steps)]
        extra += (["--checkpointing"] if args.checkpointing else []) + (["--saved"] if args.saved else [])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if args.mmap_threshold is not None:
            env["MALLOC_MMAP_THRESHOLD_"] = str(int(args.mmap_threshold * 2**20))
        command = [sys.executable, __file__, "--cp", str(cp), "--port", str(port), "--out", out, *extra]
        procs = [
            subprocess.Popen(
                command + ["--rank", str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for r in range(cp)
        ]
        logs = [p.communicate()[0] for p in procs]
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise SystemExit(
                    "trl_sft_cp_memory: cp %d rank %d exited %d:\n%s" % (cp, r, p.returncode, logs[r][-4000:])
                )
        ranks = []
        for r in range(cp):
            with open(os.path.join(out, "rank%d.json" % r)) as f:
                ranks.append(json.load(f))
    top = max(ranks, key=lambda x: x["peak"])
    later = [max(r["steps"][i] for r in ranks) for i in range(1, len(ranks[0]["steps"]))] or ranks[0]["steps"]
    return dict(cp=cp, tokens=top["tokens"], peak=top["peak"], before=top["before"],
                live=max(r["live"] for r in ranks),
                added=top["peak"] - top["before"], step=sum(later) / len(later),
                saved=max(r["saved"] for r in ranks))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cps", default="1,2,4")
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--text", type=int, default=12000)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing (SFTConfig's default)")
    parser.add_argument("--saved", action="store_true", help="one forward: the MiB autograd saves, no training")
    parser.add_argument("--mmap-threshold", type=float, help="MALLOC_MMAP_THRESHOLD_ in MiB (glibc: dynamic)")
    parser.add_argument("--json")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cp", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        return rank_main(args)
    rows = [run(int(c), args) for c in args.cps.split(",")]
    base = rows[0]
    if args.saved:
        print("| CP | saved by autograd, MiB (largest rank) | ratio |\n|---|---|---|")
        for r in rows:
            print("| %d | %.0f | %.3f |" % (r["cp"], r["saved"], r["saved"] / base["saved"]))
    else:
        print("| CP | tokens | peak MiB (largest rank) | ratio | added by training MiB | ratio | live peak MiB | ratio "
              "| step s | ratio |\n|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
        for r in rows:
            print("| %d | %d | %.0f | %.3f | %.0f | %.3f | %.0f | %.3f | %.2f | %.3f |" % (
                r["cp"], r["tokens"], r["peak"], r["peak"] / base["peak"], r["added"], r["added"] / base["added"],
                r["live"], r["live"] / base["live"], r["step"], r["step"] / base["step"]))  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
