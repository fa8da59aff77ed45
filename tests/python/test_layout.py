"""The package as a library (issue 35): no import cycle (function-level imports count), private
internals, one descriptor per family, the C++ and Python field lists in step, the supported
transformers range refused by name, and what `enable` accepts as a group. Single process."""

import ast
import dataclasses
import os

import pytest
import torch

import frameshard
from frameshard import _C, hf
from frameshard.hf import _compat, _family, _patches

# Compiled modules: leaves of the import graph (the extension imports no Python module).
EXTENSIONS = {"frameshard._C"}
PACKAGE = os.path.dirname(os.path.realpath(frameshard.__file__))


def _module_name(path):
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[: -len(".py")].split(os.sep)
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _modules():
    """{module name: path} of every Python module of the package."""
    found = {}
    for root, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                found[_module_name(os.path.join(root, f))] = os.path.join(root, f)
    return found


def _imports(name, path, modules):
    """The package modules `name` imports anywhere in its file (module level or in a function):
    `from . import x` is an edge to the module x when x is one, else to the package."""
    is_package = path.endswith("__init__.py")
    package = name if is_package else name.rsplit(".", 1)[0]
    edges = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            edges |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = base + ("." + node.module if node.module else "")
            else:
                base = node.module or ""
            for a in node.names:
                if "%s.%s" % (base, a.name) in EXTENSIONS:
                    continue
                if "%s.%s" % (base, a.name) in modules:
                    edges.add("%s.%s" % (base, a.name))
                elif base in modules:
                    edges.add(base)
    # A package that imports every module of its own (frameshard.hf._families, by pkgutil).
    if is_package and "pkgutil.iter_modules(__path__)" in open(path).read():
        edges |= {m for m in modules if m.startswith(name + ".") and m.count(".") == name.count(".") + 1}
    edges.discard(name)
    return edges


def _cycle(graph):
    """One import cycle of `graph` as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle_counting_lazy_imports():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "frameshard.hf._families.qwen2_vl" in graph["frameshard.hf._families"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    # The checker finds a cycle where there is one.
    assert _cycle({**graph, "frameshard._towers": graph["frameshard._towers"] | {"frameshard.hf._family"}})


def test_internal_modules_are_private():
    public = {"frameshard", "frameshard.hf", "frameshard.cli", "frameshard.__main__"}
    public |= {"frameshard.integrations", "frameshard.integrations.trl"}
    leaked = [m for m in _modules() if m not in public and not any(p.startswith("_") for p in m.split(".")[1:])]
    assert not leaked, leaked
    # The facades' public names are their __all__ (and the subpackages / imports torch needs).
    from frameshard.integrations import trl as fs_trl

    facades = ((frameshard, {"hf", "cli", "integrations", "torch", "logging", "annotations"}), (hf, {"annotations"}))
    for package, extra in (*facades, (fs_trl, {"annotations"})):
        names = {n for n in vars(package) if not n.startswith("_")} - extra - {"FrameshardError"}
        assert set(package.__all__) >= names, sorted(names - set(package.__all__))
        assert all(hasattr(package, n) for n in package.__all__)


def test_every_family_is_one_descriptor_matched_along_the_class_hierarchy():
    families = {f.name: f for f in hf.families()}
    assert {
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "qwen3_5",
        "qwen3_5_moe",
        "glm4v",
        "glm4v_moe",
    } <= set(families)
    assert {"nemotron_h_omni", "paddleocr_vl"} <= set(families)
    for f in families.values():
        assert bool(f.vision) != bool(f.features), f.name  # sharded at one place
        assert (f.features_call is not None) == bool(f.features), f.name
    # A transformers subclass matches; a look-alike outside transformers does not.
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    sub = type("MyTower", (modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel,), {})
    assert _family.of_vision(sub.__new__(sub)).name == "qwen2_vl"
    fake = type("Qwen2VisionTransformerPretrainedModel", (torch.nn.Module,), {})()
    assert _family.of_vision(fake) is None


def test_a_new_family_is_one_registration():
    """What a family module does, done here: afterwards the registry, tower_dims and the errors
    know the family without any other edit."""
    new = _family.Family(
        name="test_family",
        module="qwen2_vl",
        model_types=("test_family",),
        dims=lambda c: frameshard.TowerDims(name="test", depth=1, hidden=8, intermediate=16),
        vision=("TestVisionModelThatDoesNotExist",),
    )
    _family.register(new)
    try:
        config = type("Config", (), {"model_type": "test_family"})()
        assert frameshard.tower_dims(config).name == "test"
        assert "TestVisionModelThatDoesNotExist" in _family.class_names("vision")
        with pytest.raises(ValueError, match="registered twice"):
            _family.register(new)
    finally:
        _family._FAMILIES.pop("test_family")
        frameshard._towers._READERS.pop("test_family")


def test_the_cpp_and_python_field_lists_agree():
    """The config: FrameShardingConfig's fields are the C++ schema's frame_sharding keys. The call
    options: shard_vision fills a _C.ShardCall, setting every field the C++ side has, none unknown."""
    import inspect

    fields = [f.name for f in dataclasses.fields(frameshard.FrameShardingConfig)]
    assert fields == list(_C.config_fields()), (fields, _C.config_fields())
    source = inspect.getsource(frameshard._shard.shard_vision)
    assigned = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and getattr(node.value, "id", "") == "options"
    }
    assert assigned == set(_C.ShardCall.fields()), (sorted(assigned), _C.ShardCall.fields())
    assert set(_C.ShardCall.fields()) == {n for n in dir(_C.ShardCall()) if not n.startswith("_") and n != "fields"}


@pytest.mark.parametrize("version", ["4.57.6", "5.16.2", "6.0.0"])
def test_a_transformers_release_outside_the_range_is_refused_by_name(monkeypatch, solo_group, version):
    import transformers

    monkeypatch.setattr(transformers, "__version__", version)
    with pytest.raises(frameshard.FrameshardError) as err:
        hf.enable(torch.nn.Linear(2, 2), solo_group)
    assert str(err.value) == (
        "frameshard.hf.enable: expected transformers >=5.17.0,<6 (the releases frameshard.hf supports), "
        "got transformers %s" % version
    )
    with pytest.raises(frameshard.FrameshardError, match="frameshard.hf.context_parallel: expected transformers"):
        hf.context_parallel(torch.nn.Linear(2, 2), solo_group)


def test_the_range_reads_release_versions():
    assert hf.SUPPORTED_TRANSFORMERS == ">=5.17.0,<6"
    low, high = _compat.bounds()
    assert (low, high) == ("5.17.0", "6") and _compat.oldest_transformers() == "5.17.0"
    assert _compat.supported(low) and not _compat.supported(high)
    assert _compat.supported("5.25.0") and _compat.supported("5.18.0") and _compat.supported("5.17.0")
    assert _compat.supported("5.26.0rc1") and not _compat.supported("4.57.6") and not _compat.supported("6.0.0.dev0")
    assert _compat.supported(_compat.transformers_version())  # the pinned release
    with pytest.raises(ValueError, match="expected a range '>=LOW,<HIGH', got '==5.17.0'"):
        _compat.bounds("==5.17.0")


def test_the_hf_extra_states_the_supported_range():
    """pyproject.toml's `hf` extra and frameshard.hf.SUPPORTED_TRANSFORMERS say the same."""
    pyproject = os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml")
    with open(pyproject) as f:
        text = f.read()
    assert 'hf = ["transformers%s"]' % hf.SUPPORTED_TRANSFORMERS in text


@pytest.mark.parametrize("group", ["cpu", 2, object()])
def test_enable_refuses_what_is_not_a_group_at_once(group):
    import hf_models

    model, _visual, _ = hf_models.build("qwen2_vl")
    with pytest.raises(frameshard.FrameshardError) as err:
        hf.enable(model, group)
    assert "expected a torch.distributed ProcessGroup, a DeviceMesh, a frameshard.Mesh or None" in str(err.value)
    assert "got a %s" % type(group).__name__ in str(err.value)
    assert not hf.is_enabled(model)


def test_disable_undoes_every_patch_and_context_parallel_too(solo_group):
    import hf_models

    model, visual, _ = hf_models.build("qwen2_5_vl")
    lm = model.model.language_model
    before = (dict(visual.__dict__), dict(lm.__dict__), lm.config._attn_implementation)
    hf.enable(model, solo_group, frameshard.FrameShardingConfig(enabled=True, split_frames=True))
    cp = hf.context_parallel(model, solo_group)
    assert _patches.state(visual, "vision") is not None and lm.config._attn_implementation == "frameshard_cp"
    assert hf.disable(model) and cp.remove()
    assert (dict(visual.__dict__), dict(lm.__dict__), lm.config._attn_implementation) == before
    assert not any("forward" in b.attn.__dict__ or "_frameshard_split" in b.attn.__dict__ for b in visual.blocks)


def test_the_path_is_logged_once_per_change_with_its_reason(caplog):
    from frameshard import _shard

    sharding = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0, split_frames=True)
    grid = [[1, 8, 8], [1, 8, 8], [1, 4, 4]]
    sharded = frameshard.plan(grid, 2, sharding)
    replicated = frameshard.plan(grid, 2, frameshard.FrameShardingConfig(enabled=True))
    key = object()
    with caplog.at_level("INFO", logger="frameshard"):
        for plan, config in ((sharded, sharding), (sharded, sharding), (replicated, sharding), (sharded, sharding)):
            _shard.log_path(key, plan, "hf.enable(Tower)", config)
    messages = [r.getMessage() for r in caplog.records if r.name == "frameshard"]
    assert len(messages) == 3, messages  # the second call took the same path: not logged again
    assert messages[0].startswith("hf.enable(Tower): sharded over 2 ranks, optimal, whole frames (no cut")
    assert "split_min_gain" in messages[0] and sharded.reason in messages[0]
    assert messages[1] == "hf.enable(Tower): replicated on each of 2 ranks: %s" % replicated.reason
    assert "min_tokens" in replicated.reason  # the thresholds say why a small batch replicated


def test_shard_vision_logs_its_path_once_for_repeated_calls(caplog, solo_group):
    def tower(pv, grid, cu):
        return pv.reshape(-1, 4 * pv.shape[1])

    pixels = torch.randn(32, 3)
    with caplog.at_level("INFO", logger="frameshard"):
        for _ in range(3):
            frameshard.shard_vision(tower, pixels, [[1, 4, 4], [1, 4, 4]], solo_group)
    messages = [r.getMessage() for r in caplog.records if r.name == "frameshard"]
    assert messages == ["shard_vision: replicated on each of 1 ranks: cp_size 1 <= 1"], messages


def test_a_random_tower_of_every_whole_tower_family_is_its_family():
    """`python -m frameshard calibrate --family F` and the benchmarks build these."""
    from frameshard.hf import _random

    assert set(_random.families()) == {f.name for f in hf.families() if f.vision}
    for name in _random.families():
        visual = _random.vision_module(name, 32, 2)
        assert _family.of_vision(visual).name == name
        assert frameshard.tower_dims(visual).depth == 2 and frameshard.tower_dims(visual).hidden == 32
