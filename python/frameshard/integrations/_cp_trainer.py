"""Context parallelism (CP) for a vision-language model in a transformers Trainer: TRL's
SFTTrainer, or the Trainer itself. The trainer runs as it was written -- its data, loss, logging,
saving and evaluation -- with the model's sequence and vision tower divided over the CP ranks:

    session = install(trainer, config, cp_size=2, fn="frameshard.integrations.trl.enable")
    trainer.train()
    remove(trainer)

What `install` changes, each to keep the trainer's own arithmetic true:
- the processes form a ("dp", "cp") DeviceMesh of W/C x C (cp innermost, as accelerate orders it);
- data: the dataloaders accelerate prepares are sharded over dp only, so the C ranks of a CP
  group draw the same batches and the global batch is dp x per-device x accumulation, as without
  CP (the shard's num_processes / process_index, as the Trainer itself resets them);
- the model: `hf.context_parallel(outputs="whole")` runs its decoder on 1/C of the sequence and
  gathers the last hidden state back, so the head, the logits and the loss a trainer computes are
  the unsharded model's on every rank; `hf.enable` (mesh_dims [cp], by default gather "owner")
  frame-shards the tower over the CP group;
- gradients: every rank's loss is its replica's whole loss, and the ranks' gradients sum to C x
  the replica's, so accelerate's DDP or FSDP2, averaging over all W processes, gives the replicas'
  mean: what the run without CP gets averaging over its dp processes. The Trainer's token count
  (`num_items_in_batch`, gathered over all processes: C copies of each replica's) and its loss
  factor (`num_processes`: C x dp) cancel in the same way;
- metrics: `accelerator.gather_for_metrics` keeps one copy per CP group, so logged metrics, TRL's
  token counts and `evaluate()` / `predict()` are the run without CP's;
- padding: a right-padding attention mask (TRL's collators right-pad) is dropped before the model
  (causal attention: no real token sees a later pad; the pads' labels must be -100, checked);
- accelerate's own CP (`ParallelismConfig(cp_size=C)`), when set: its context and its input
  splitting do not run, and the Trainer's division of the token count by C is undone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any

import torch
import torch.distributed as dist

from .. import _unwrap
from .. import hf as _hf
from .._C import FrameshardError
from .._config import FrameShardingConfig
from ..hf import _enable, _patches

_LOG = logging.getLogger("frameshard")
OWNER = "cp_trainer"  # the patch registry's owner of the trainer's patches
PACKED_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "cu_seqlens", "seq_lens")


@dataclasses.dataclass
class Session:
    """One trainer under CP (the patch registry's state of OWNER)."""

    mesh: Any  # the ("dp", "cp") DeviceMesh
    cp: Any  # the hf.ContextParallel handle
    dp: int
    cp_size: int
    root: torch.nn.Module  # the transformers model, unwrapped
    vision: bool  # whether hf.enable sharded its tower
    accelerate_cp: bool  # a ParallelismConfig with cp_size C was taken over
    hooks: list


def cp_config() -> FrameShardingConfig:
    """The defaults of `enable(trainer, None, cp_size=C)` for a Trainer: frame sharding on, each
    visual row sent only to the CP rank whose tokens hold it (gather "owner"), over the CP group."""
    return FrameShardingConfig(enabled=True, gather="owner", mesh_dims=["cp"])


def _error(fn: str, text: str) -> FrameshardError:
    return FrameshardError("%s: %s" % (fn, text))


def _accelerate_cp(trainer: Any, cp_size: int, fn: str) -> bool:
    """Whether accelerate's ParallelismConfig declares this CP (taken over); refuses another."""
    pc = getattr(trainer.accelerator, "parallelism_config", None)
    if pc is None:
        return False
    other = {n: int(getattr(pc, n, 1) or 1) for n in ("tp_size", "sp_size")}
    if any(v != 1 for v in other.values()):
        raise _error(fn, "expected ParallelismConfig tp_size and sp_size 1 with CP, got %s" % other)
    if not pc.cp_enabled:
        return False
    if int(pc.cp_size) != cp_size:
        raise _error(fn, "cp_size: expected the ParallelismConfig's cp_size %d, got %d" % (int(pc.cp_size), cp_size))
    return True


def _mesh(trainer: Any, cp_size: int, fn: str) -> Any:
    """The ("dp", "cp") DeviceMesh over the trainer's processes (collective: new groups)."""
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415

    if not (dist.is_available() and dist.is_initialized()):
        raise _error(fn, "expected torch.distributed initialized (torchrun / accelerate launch), got it uninitialized")
    world = dist.get_world_size()
    if world != int(trainer.accelerator.num_processes) or world % cp_size:
        raise _error(
            fn,
            "cp_size: expected a divisor of the %d processes (world %d), got %d"
            % (int(trainer.accelerator.num_processes), world, cp_size),
        )
    device = "cpu" if dist.get_backend() == "gloo" else torch.device(trainer.accelerator.device).type
    return init_device_mesh(device, (world // cp_size, cp_size), mesh_dim_names=("dp", "cp"))


def _config(config: FrameShardingConfig | None, fn: str) -> FrameShardingConfig:
    if config is None:
        return cp_config()
    if not isinstance(config, FrameShardingConfig):
        raise _error(fn, "expected config a frameshard.FrameShardingConfig or None, got %s" % type(config).__name__)
    if list(config.mesh_dims) != ["cp"]:
        # A CP group holds one batch; pooling the replicas' frames would line up their calls.
        _LOG.info("%s: mesh_dims %s -> ['cp'] (each CP group encodes its own batch)", fn, config.mesh_dims)
        config = dataclasses.replace(config, mesh_dims=["cp"])
    return config


def _shard_over_dp(loader: Any, session: Session, fn: str) -> Any:
    """A dataloader accelerate prepared over all processes, resharded over dp: the shard's
    num_processes and process_index are read at every iteration (and by len), so setting them
    gives the CP ranks of a group the same batches."""
    from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher, IterableDatasetShard  # noqa: PLC0415

    if isinstance(loader, DataLoaderDispatcher):
        raise _error(fn, "expected dataloaders sharded per process, got accelerate's dispatch_batches=True")
    shards = [s for s in (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None)) if s is not None]
    shards = [s for s in shards if isinstance(s, BatchSamplerShard)]
    if isinstance(getattr(loader, "dataset", None), IterableDatasetShard):
        shards.append(loader.dataset)
    dp_rank = session.mesh.get_local_rank("dp")
    for shard in shards:
        if shard.num_processes not in (1, session.dp):  # 1: already per replica (the Trainer's own)
            shard.num_processes, shard.process_index = session.dp, dp_rank
            if session.dp == 1 and hasattr(shard, "even_batches"):
                # One replica: accelerate would not have wrapped the loader, so nor complete its
                # last batch with the first samples (even_batches pads it to the batch size).
                shard.even_batches = False
    return loader


def _prepare_data_loader(session: Session, fn: str) -> Any:
    def make(original: Any) -> Any:
        def prepare_data_loader(*args: Any, **kwargs: Any) -> Any:
            return _shard_over_dp(original(*args, **kwargs), session, fn)

        return prepare_data_loader

    return make


def _one_per_cp_group(gathered: Any, session: Session) -> Any:
    """A gather over all processes (rank-major: dp x cp, cp innermost) -> the copy of each CP
    group's first rank, as the run without CP gathers over its dp processes."""
    world = session.dp * session.cp_size

    def keep(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] % world:
            return t
        return t.reshape(world, t.shape[0] // world, *t.shape[1:])[:: session.cp_size].reshape(-1, *t.shape[1:])

    from accelerate.utils import recursively_apply  # noqa: PLC0415

    return recursively_apply(keep, gathered, error_on_other_type=False)


def _gather_for_metrics(accelerator: Any, session: Session) -> Any:
    def make(original: Any) -> Any:
        def gather_for_metrics(input_data: Any, use_gather_object: bool = False) -> Any:
            with _one_copy_gathers(accelerator, session):
                return original(input_data, use_gather_object=use_gather_object)

        return gather_for_metrics

    return make


@contextlib.contextmanager
def _one_copy_gathers(accelerator: Any, session: Session) -> Any:
    """accelerator.gather keeps one copy per CP group inside the block (gather_for_metrics calls
    it, then drops the last batch's padding as it would over dp processes)."""
    own = accelerator.__dict__.get("gather")
    original = accelerator.gather
    accelerator.gather = lambda tensor: _one_per_cp_group(original(tensor), session)
    try:
        yield
    finally:
        if own is None:
            del accelerator.gather
        else:
            accelerator.gather = own


def _right_padding(mask: torch.Tensor) -> bool:
    """Whether every row of a 2-D 0/1 mask is ones then zeros."""
    lengths = mask.sum(dim=-1, keepdim=True)
    return bool((mask == (torch.arange(mask.shape[-1], device=mask.device) < lengths)).all())


def _drop_right_padding(fn: str) -> Any:
    """A forward pre-hook of the multimodal model: a right-padding attention mask -> None (the
    CP forward is causal over the whole sequence; the pads come last, so no real token sees one)."""

    def hook(_module: Any, args: tuple, kwargs: dict) -> tuple:
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:
            if not _right_padding(mask):
                raise _error(
                    fn,
                    "attention_mask: expected right padding (ones then zeros in each row: the "
                    "tokenizer's padding_side 'right', as TRL's collators pad), got zeros before tokens",
                )
            kwargs = dict(kwargs, attention_mask=None)
        return args, kwargs

    return hook


def _check_batch(inputs: dict, fn: str) -> None:
    """What the CP forward cannot run, refused on every rank (their batches are the same)."""
    packed = [k for k in PACKED_KEYS if inputs.get(k) is not None]
    position_ids = inputs.get("position_ids")
    if packed or (isinstance(position_ids, torch.Tensor) and position_ids.dim() == 2):
        raise _error(
            fn,
            "expected unpacked batches (one sequence per row), got %s; set padding_free=False and "
            "packing=False in the SFTConfig (or a collator without them)" % ", ".join(packed or ["position_ids"]),
        )
    mask, labels = inputs.get("attention_mask"), inputs.get("labels")
    if isinstance(mask, torch.Tensor) and isinstance(labels, torch.Tensor) and labels.shape == mask.shape:
        bad = int(((mask == 0) & (labels != -100)).sum())
        if bad:
            raise _error(fn, "labels: expected -100 at every padded position, got %d labelled pad(s)" % bad)


def _compute_loss(session: Session, fn: str) -> Any:
    def make(original: Any) -> Any:
        def compute_loss(model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
            _check_batch(inputs, fn)
            count = kwargs.get("num_items_in_batch")
            if session.accelerate_cp and count is not None:
                # The Trainer divided the gathered count by accelerate's cp_size (its ranks compute
                # shares); frameshard's compute the whole loss, whose factor num_processes needs
                # the C copies.
                kwargs["num_items_in_batch"] = count * session.cp_size
            return original(model, inputs, *args, **kwargs)

        return compute_loss

    return make


def _no_accelerate_cp(original: Any) -> Any:
    def _prepare_context_parallel_inputs(model: Any, inputs: dict) -> tuple:
        return contextlib.nullcontext, inputs  # frameshard's CP runs inside the model

    return _prepare_context_parallel_inputs


def _multimodal_model(root: torch.nn.Module, lm: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward takes the attention mask and calls the language model: the
    ...ForConditionalGeneration's `.model`, or the language model itself."""
    inner = getattr(root, "model", None)
    return inner if isinstance(inner, torch.nn.Module) and getattr(inner, "language_model", None) is lm else lm


def _patches_of(trainer: Any, session: Session, fn: str) -> list:
    accelerator = trainer.accelerator
    patches = [
        _patches.wrapped(trainer, "compute_loss", _compute_loss(session, fn)),
        _patches.wrapped(accelerator, "gather_for_metrics", _gather_for_metrics(accelerator, session)),
    ]
    # Without a ParallelismConfig accelerate shards the data over every process; with one, its
    # mesh's "cp" dimension shards it over dp already (the shard is then left as it is).
    patches.append(_patches.wrapped(accelerator, "prepare_data_loader", _prepare_data_loader(session, fn)))
    if session.accelerate_cp:
        patches.append(_patches.wrapped(trainer, "_prepare_context_parallel_inputs", _no_accelerate_cp))
    return patches


def install(trainer: Any, config: FrameShardingConfig | None, cp_size: int, fn: str) -> Session:
    """CP over `cp_size` ranks on `trainer` (a transformers Trainer, built, not yet training;
    see the module's docstring). Collective: every process calls it (it creates the mesh's groups)."""
    if trainer.args.eval_use_gather_object:
        raise _error(fn, "expected eval_use_gather_object False (tensors are gathered one copy per CP group), got True")
    config = _config(config, fn)
    accelerate_cp = _accelerate_cp(trainer, cp_size, fn)
    mesh = _mesh(trainer, cp_size, fn)
    model = trainer.model
    root = _unwrap.unwrap_module(model)
    vision = _enable.find(model).vision is not None
    cp = _hf.context_parallel(model, mesh, outputs="whole")
    try:
        if vision:
            _hf.enable(model, mesh, config)
    except BaseException:
        cp.remove()
        raise
    session = Session(
        mesh=mesh,
        cp=cp,
        dp=mesh.size(0),
        cp_size=cp_size,
        root=root,
        vision=vision,
        accelerate_cp=accelerate_cp,
        hooks=[],
    )
    holder = _multimodal_model(root, cp.language_model)
    session.hooks.append(holder.register_forward_pre_hook(_drop_right_padding(fn), with_kwargs=True))
    _patches.install(trainer, OWNER, session, _patches_of(trainer, session, fn))
    # The Trainer bound its gather before: rebind it to the one-copy gather.
    trainer.gather_function = trainer.accelerator.gather_for_metrics
    _LOG.info(
        "%s: dp %d x cp %d, the tower %s, accelerate's CP %s",
        fn,
        session.dp,
        cp_size,
        "frame-sharded (gather %s)" % config.gather if vision else "absent",
        "taken over" if accelerate_cp else "unset",
    )
    return session


def remove(trainer: Any) -> Session | None:
    """Undoes `install`; the session it removed, or None."""
    session = _patches.uninstall(trainer, OWNER)
    if session is None:
        return None
    trainer.gather_function = trainer.accelerator.gather_for_metrics
    if session.vision:
        _hf.disable(session.root)
    session.cp.remove()
    return session
