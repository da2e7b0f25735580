"""Every model family ``transformers`` can build on the CPU, small and at its standard init: the
doctor's calibration over the whole zoo (issue 30), not over a list.

The families are the keys of transformers' ``MODEL_MAPPING_NAMES`` (what ``AutoModel`` builds).
Each family's default config is shrunk to fit the CPU, recursively through its sub-configs
(text, vision, audio, encoder and decoder): hidden size 64, 2 layers (every per-layer list cut
to the same layers, one of each kind kept), 4 heads of 16, feed-forward 4x wide, a few experts,
a vocabulary of 1000 (special tokens moved into it), images of 4 patches a side (at least 32
pixels; 64 without patches), 4000 audio samples or 128 spectrogram frames. Where the full shrink
breaks a config, lighter ones follow (:data:`LEVELS`: keep the widths, then only cut the layers,
then the default); a level is taken when its model builds, holds at most :data:`MAX_PARAMS`
parameters (counted on the meta device first) and runs a forward pass on one of the inputs its
forward signature takes (:func:`candidates`). Where a family's config does not hold together
shrunk, :data:`FIXES` says what else it needs, and why.

A family is *skipped*, with its reason, only when it cannot be built here: it needs a package
that is not installed (:data:`PACKAGES`), or something no config can give (:data:`SKIPS`).
Backbones come from their configs, never pretrained (timm's ResNet is replaced by
transformers' own). A family whose every level fails is *failed*, with the exception of each
level: a gap of this enumeration, not a skip.

Run ``python -m tests.hfzoo [--write docs/zoo.md] [--only fam1,fam2]`` to diagnose every built
family at seed 0 and write the table (``make calibrate``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import inspect
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard, cast

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a download

import torch
from torch import nn

SEED = 0
BATCH, TOKENS, DECODER_TOKENS = 8, 32, 16
VOCAB, WIDTH, LAYERS, HEADS, HEAD_DIM = 1000, 64, 2, 4, 16
FFN = 4 * WIDTH
SAMPLES, FRAMES = 4000, 128  # raw waveform samples; spectrogram frames (whisper: 2 x positions)
SPECIAL = 64  # token ids at the top of the vocabulary kept for the config's special tokens
MAX_PARAMS = 40_000_000  # a bigger model does not fit the zoo's time budget on 2 cores
MAX_IMAGE = 384  # pixels a side, the same (SAM's default is 1024)
KINDS = ("text", "vision", "audio", "multimodal", "other")

Kwargs = dict[str, Any]
Batch = dict[str, torch.Tensor]


@dataclass
class Row:
    """One family of the zoo: what was built and fed, or why not."""

    family: str
    kind: str = "other"  # one of KINDS
    model_class: str = ""
    params: int = 0
    input: str = ""  # the batch's fields and shapes
    built: bool = False
    skip: str | None = None  # cannot be built here, and why
    error: str | None = None  # every shrink level failed: what each said
    level: str = ""  # the shrink level that built (LEVELS)
    output: str | None = None  # the ModelOutput field the doctor reads
    named: bool = False  # output is passed as output=, not the doctor's default
    training: bool = True  # the mode it is diagnosed in (eval where training mode refuses)
    notes: list[str] = field(default_factory=list)  # what was built differently, and why
    tries: list[str] = field(default_factory=list)  # what each shrink level before it said

    @property
    def status(self) -> str:
        return "built" if self.built else "skipped" if self.skip else "failed"


@dataclass
class Built:
    """A family's model, its seeded input batches and its row."""

    row: Row
    model: nn.Module
    batches: list[Batch] = field(default_factory=list)


# --- which families, and which cannot be built here ------------------------------------------


def families() -> list[str]:
    """Every family ``AutoModel`` builds (transformers' ``MODEL_MAPPING_NAMES``), sorted."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


_SESSION = (
    "its forward takes an inference_session (the video tracking state its processor builds "
    "from a video), not a batch of tensors"
)
SKIPS: dict[str, str] = {
    "voxtral_realtime_text": "transformers 5.23 maps it to VoxtralRealtimeTextModel, a class it "
    "does not define",
    "sam2_video": _SESSION,
    "sam3_tracker_video": _SESSION,
    "sam3_video": _SESSION,
    "edgetam_video": _SESSION,
    "vits": "its waveform is as long as its duration predictor says, and at random init that "
    "is thousands of frames a token: gigabytes for 8 x 32 tokens, its deterministic predictor "
    "too (killed by the kernel's OOM killer on this machine)",
}
"""Families that cannot be built here, and the specific reason (checked by hand)."""

_TIMM = ("timm",)
PACKAGES: dict[str, tuple[str, ...]] = {
    "dinat": ("natten",),  # neighborhood attention kernels
    "layoutlmv2": ("detectron2",),  # its visual backbone
    "higgs_audio_v2_tokenizer": ("torchaudio",),
    # timm models inside (a TimmWrapper vision tower, a timm backbone)
    **dict.fromkeys(
        (
            "edgetam",
            "edgetam_vision_model",
            "fast_vlm",
            "gemma3n",
            "gemma3n_vision",
            "pe_audio_video",
            "pe_audio_video_encoder",
            "pe_video",
            "pe_video_encoder",
            "perception_lm",
            "timm_backbone",
            "timm_wrapper",
        ),
        _TIMM,
    ),
}
"""Families that need packages beyond transformers' own (checked with importlib), from the
ImportError each raises without them."""


def _class_name(family: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES[family]
    return name if isinstance(name, str) else name[0]


def model_class(family: str) -> type[nn.Module]:
    """The class ``AutoModel`` builds for ``family`` (an ``ImportError`` where it needs a
    package that is not installed)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        return cast(type[nn.Module], getattr(transformers, _class_name(family)))
    except AttributeError:  # a class transformers does not export at its top level
        return cast(type[nn.Module], MODEL_MAPPING[CONFIG_MAPPING[family]])


def skip_reason(family: str) -> str | None:
    """Why ``family`` cannot be built here, or ``None``: a reason recorded in :data:`SKIPS`,
    or a package of :data:`PACKAGES` that is not installed. Static, so the docs' table can be
    checked without building anything; a package transformers asks for that is not listed
    shows as a build failure naming it."""
    if family in SKIPS:
        return SKIPS[family]
    missing = [p for p in PACKAGES.get(family, ()) if importlib.util.find_spec(p) is None]
    return f"needs {', '.join(missing)}, not installed" if missing else None


def _message(exc: BaseException, limit: int = 240) -> str:
    """``Type: message`` on one line, cut at ``limit``."""
    text = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- shrinking a config ------------------------------------------------------------------------

LEVELS = ("all", "keep widths", "layers only", "default")
"""The shrink levels, tried in order: everything; all but the widths, heads and feed-forward
sizes; only the number of layers; the default config (when it is small enough)."""

# Config keys are matched by how their names end, so that a family's own prefixes
# (``speech_encoder_layers``, ``pred_num_hidden_layers``, ``vision_embed_dim``) are shrunk too.
_LAYERS = ("num_hidden_layers", "_layers", "n_layer", "n_layers", "depth")
_NOT_LAYERS = ("num_feat_extract_layers", "num_kv_shared_layers", "mlp_only_layers")
_WIDTHS = (
    "hidden_size",
    "d_model",
    "n_embd",
    "n_embed",
    "embed_dim",
    "emb_dim",
    "emb_size",
    "hidden_dim",
    "embedding_size",
    "projection_dim",
)
_HEADS = ("attention_heads", "n_head", "n_heads", "num_heads")
_KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num")
_HEAD_DIMS = {"head_dim": HEAD_DIM, "d_kv": HEAD_DIM, "kv_channels": HEAD_DIM}
_MLA = {  # DeepSeek's multi-head latent attention: its own head and rank sizes
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "qk_head_dim": 24,
    "v_head_dim": 16,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
}
_FFNS = ("intermediate_size", "ffn_dim", "d_ff", "n_inner", "mlp_dim")
_MOE_FFNS = ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_ffn_dim")
_EXPERTS = {  # mixtures of experts: a few experts, two per token
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
}
_POSITIONS = {
    "max_position_embeddings": 512,
    "n_positions": 512,
    "max_target_positions": 512,
    "max_source_positions": FRAMES // 2,  # whisper-like encoders take exactly 2x this many frames
}
_STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "embed_dim", "neck_hidden_sizes", "dims")
_STAGE_HEADS = ("num_heads", "num_attention_heads")


def _keys(values: Kwargs, endings: tuple[str, ...], but: tuple[str, ...] = ()) -> list[str]:
    """The keys holding an int whose names end with one of ``endings`` (and are not in
    ``but``)."""
    return [k for k, v in values.items() if _is_int(v) and k.endswith(endings) and k not in but]


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(v: object) -> TypeGuard[list[int]]:
    return isinstance(v, list | tuple) and bool(v) and all(_is_int(x) for x in v)


def _cap(values: Kwargs, keys: Any, target: int) -> Kwargs:
    """``key: target`` for every key holding an int above ``target``."""
    return {k: target for k in keys if _is_int(values.get(k)) and values[k] > target}


def _kept_layers(lists: list[list[Any]], old: int) -> list[int]:
    """Which of ``old`` layers to keep: the first :data:`LAYERS`, and the first layer of each
    kind a per-layer list names (a hybrid's attention layer among its Mamba layers), so the
    small model has every kind of layer the big one has."""
    keep = set(range(min(LAYERS, old)))
    for v in lists:
        kinds = {repr(x) for x in v}
        if len(kinds) <= 2 * LAYERS:  # a list of layer kinds, not of per-layer sizes
            keep |= {[repr(x) for x in v].index(k) for k in kinds}
    return sorted(keep)


def _layer_rules(values: Kwargs) -> Kwargs:
    """Fewer layers (:func:`_kept_layers`), every per-layer list (length = the old count) cut
    to the same layers, layer index lists clamped into the new range; stage depths 2 at most."""
    out: Kwargs = {}
    for key in _keys(values, _LAYERS, _NOT_LAYERS):
        old = values[key]
        if old <= LAYERS:
            continue
        lists = {k: v for k, v in values.items() if isinstance(v, list) and len(v) == old}
        keep = _kept_layers(list(lists.values()), old)
        out[key] = len(keep)
        out |= {k: [v[i] for i in keep] for k, v in lists.items()}
        for k, v in values.items():
            if k not in lists and _int_list(v) and ("index" in k or "indices" in k or "idx" in k):
                top = len(keep) if k == "out_indices" else len(keep) - 1  # out_indices: stem 0
                out[k] = sorted({min(i, top) for i in v})
    if _int_list(values.get("depths")):
        out["depths"] = [min(d, LAYERS) for d in values["depths"]]
    return out


def _local_rules(values: Kwargs) -> Kwargs:
    """No download: a backbone built from its config, not pretrained weights or timm's."""
    out: Kwargs = {
        k: False for k in ("use_pretrained_backbone", "use_timm_backbone") if values.get(k)
    }
    if out.get("use_timm_backbone") is False and values.get("backbone"):
        out["backbone"] = None  # a timm model name: the backbone config's default (ResNet) instead
    return out


def _image_size(values: Kwargs) -> int:
    """A small image holding a whole number of patches, 4+ a side, 32+ pixels."""
    patch = values.get("patch_size")
    patch = patch[0] if _int_list(patch) else patch
    if not _is_int(patch) or patch <= 0:
        return 64
    return int(patch * max(4, math.ceil(32 / patch)))


def _input_rules(values: Kwargs, ids: dict[int, int]) -> Kwargs:
    """A small vocabulary (special token ids moved into it), image, video, positions, experts."""
    out = _cap(values, [k for k in values if "vocab" in k and "type_vocab" not in k], VOCAB)
    for key, v in _POSITIONS.items():
        out |= _cap(values, _keys(values, (key,)), v)
    out |= {k: v for k, v in _EXPERTS.items() if _is_int(values.get(k)) and values[k] > v}
    size = values.get("image_size")
    if _is_int(size) or _int_list(size):
        new = _image_size(values)
        out["image_size"] = [new] * len(size) if _int_list(size) else new
    out |= _cap(values, ["num_frames"], 4) | _window_fit(values, out)
    for key, v in values.items():
        if key.endswith(("token_id", "token_index", "token_ids")):
            moved = _move_ids(v, ids)
            if moved != v:
                out[key] = moved
    return out


def _window_fit(values: Kwargs, out: Kwargs) -> Kwargs:
    """A ViTDet-like backbone's window (in patches, among its global layers) no wider than the
    shrunk image's patch grid: a wider one is mostly zero padding (SAM pads 4 x 4 patches to
    its 14 x 14 window), and its attention averages 16 patches with 180 zeros."""
    window, patch, size = values.get("window_size"), values.get("patch_size"), out.get("image_size")
    if "global_attn_indexes" not in values or not (_is_int(window) and _is_int(patch)):
        return {}
    grid = size // patch if _is_int(size) else 0
    return {"window_size": grid} if 0 < grid < window else {}


def _move_ids(v: Any, ids: dict[int, int]) -> Any:
    """Token ids beyond :data:`VOCAB` moved to its top :data:`SPECIAL` ids, one new id per old
    one across the whole config (text and composite configs name the same tokens)."""
    if isinstance(v, list | tuple):
        return type(v)(_move_ids(x, ids) for x in v)
    if not _is_int(v) or v < VOCAB:
        return v
    if v not in ids:
        ids[v] = VOCAB - 1 - len(ids) % SPECIAL
    return ids[v]


def _width_rules(values: Kwargs) -> Kwargs:
    """Width 64, 4 heads of 16 (key-value heads dividing them), feed-forward 4x; stage lists of
    convolutional and hierarchical models scaled down together."""
    staged = any(_int_list(values.get(k)) for k in _STAGE_HEADS)  # widths double per stage
    out = _cap(values, _keys(values, _WIDTHS), WIDTH // 2 if staged else WIDTH)
    for key in _keys(values, _HEADS):
        if values[key] > HEADS or WIDTH % values[key]:
            out[key] = HEADS
    heads = next((int(out.get(k) or values[k]) for k in _keys(values, _HEADS)), HEADS)
    for key in _KV_HEADS:
        kv = values.get(key)
        if _is_int(kv) and (kv > heads or heads % kv):
            out[key] = heads if kv > heads else 1
    out |= {k: v for k, v in (_HEAD_DIMS | _MLA).items() if _is_int(values.get(k))}
    if "head_dim" in values and values["head_dim"] is None:
        out["head_dim"] = HEAD_DIM  # some models read config.head_dim without deriving it
    out |= _cap(values, ["rotary_dim"], HEAD_DIM) | _rope_rules(values)
    out |= _cap(values, _keys(values, _FFNS, _MOE_FFNS), FFN) | _cap(values, _MOE_FFNS, FFN // 2)
    for key in _STAGE_WIDTHS:
        v = values.get(key)
        if _int_list(v) and min(v) > 32:
            out[key] = [x // (min(v) // 32) for x in v]
    out |= _window_rules(values)
    for key in _STAGE_HEADS:
        v = values.get(key)
        if _int_list(v) and v[0] > 1:
            out[key] = [max(1, h // v[0]) for h in v]
    return out | _init_rules(values, out)


INIT_STDS = ("initializer_range", "init_std")
"""A config's init stds, which its authors chose for its width: std 0.02 at width 768 gives each
layer a gain of 0.02 sqrt(768) = 0.55; at width 64 the same gain needs 0.069. A shrunk model
keeps the standard init's per-layer gain, not its std (or std-0.02 weights at width 64 would
multiply the scale by 0.16 a layer, a model no one trains). The principle: the shrunk model keeps
each layer's gain, std x sqrt(fan-in), at its standard init, since the gain is what the doctor
judges; every layer drawn at its config's std is rescaled to its own full-width gain, whether its
fan-in shrank by the config's first width, by another, or not at all (:func:`_keep_gains`)."""


def _factor(values: Kwargs, out: Kwargs) -> float:
    """sqrt(width before / width after) of the config's first shrunk width (1: none shrank)."""
    shrunk = [
        k
        for k in _keys(values, _WIDTHS)
        if _is_int(values.get(k)) and _is_int(out.get(k)) and 0 < out[k] < values[k]
    ]
    return (values[shrunk[0]] / out[shrunk[0]]) ** 0.5 if shrunk else 1.0


def _init_rules(values: Kwargs, out: Kwargs) -> Kwargs:
    """The init stds scaled by sqrt(width before / width after) of the config's first width."""
    factor = _factor(values, out)
    if factor == 1.0:
        return {}
    return {key: values[key] * factor for key in INIT_STDS if isinstance(values.get(key), float)}


LIBRARY_STD = 0.02
"""The std ``PreTrainedModel._init_weights`` falls back to when a config names none of its own
(nor its text config): "the standard default value across the library"."""


def _shrink_factor(old: Any, new: Any) -> float:
    """The factor :func:`_init_rules` scales ``old``'s stds by in ``new``; a config with no width
    of its own shrunk, the geometric mean of its shrunk sub-configs' smallest and largest
    factors (1: none shrank): one std for layers shrunk by several factors, each layer's gain
    then within sqrt(largest / smallest) of its full-size one, the least worst ratio."""
    keys = _keys(_values(old, list(old.to_dict())), _WIDTHS)
    own = _factor(_values(old, keys), _values(new, keys))
    if own > 1.0:
        return own
    subs = [
        _shrink_factor(getattr(old, name), getattr(new, name))
        for name in sorted(set(getattr(old, "sub_configs", {}) or {}))
        if hasattr(getattr(old, name, None), "to_dict")
        and hasattr(getattr(new, name, None), "to_dict")
    ]
    shrunk = [f for f in subs if f > 1.0]
    return math.sqrt(min(shrunk) * max(shrunk)) if shrunk else 1.0


def _std_rules(old: Any, new: Any) -> Kwargs:
    """The init std of a composite's own layers, where :func:`_init_rules` cannot see it.

    A config whose std initializes layers sized by its sub-configs (a diarization model's
    projection and classifier, sized by its head and audio configs, none of its own widths) is
    scaled by theirs (:func:`_shrink_factor`). A config
    whose widths shrank but that names no std (nor its text config), so that its layers fall
    back to :data:`LIBRARY_STD`, is given that std scaled (a transducer's projector and joint
    head: 0.02 at width 64 is a gain of 0.16 a layer, five of them 0.0006x of the encoder; at
    full width 0.1x)."""
    factor = _shrink_factor(old, new)
    if factor == 1.0:
        return {}
    values = _values(old, list(INIT_STDS))
    if _factor(_values(old, list(old.to_dict())), _values(new, list(old.to_dict()))) == 1.0:
        return {key: v * factor for key, v in values.items() if isinstance(v, float)}
    named = values or hasattr(old, "initializer_factor")
    if named or getattr(old.get_text_config(), "initializer_range", None) is not None:
        return {}
    return {"initializer_range": LIBRARY_STD * factor}


def _window_rules(values: Kwargs) -> Kwargs:
    """Swin-like stages attend within windows: windows of 2, and an image whose every stage
    holds a whole number of them (Swin pads a stage smaller than its window, which its masks
    get wrong)."""
    window, depths = values.get("window_size"), values.get("depths")
    patch = values.get("patch_size")
    if not (_is_int(window) and _int_list(depths) and _is_int(patch)) or window <= 2:
        return {}
    size = max(32, patch * 2 * 2 ** (len(depths) - 1))
    return {"window_size": 2} | ({"image_size": size} if "image_size" in values else {})


def _rope_rules(values: Kwargs) -> Kwargs:
    """Multimodal rotary sections (Qwen2-VL's temporal, height, width) that add up to half the
    new head size, in the old proportions."""
    rope = values.get("rope_parameters")
    if not isinstance(rope, dict) or not _int_list(sections := rope.get("mrope_section")):
        return {}
    partial = rope.get("partial_rotary_factor", values.get("partial_rotary_factor")) or 1.0
    half, total = int(HEAD_DIM * partial) // 2, sum(sections)
    new = [max(1, s * half // total) for s in sections]
    new[-1] += half - sum(new)
    return {"rope_parameters": rope | {"mrope_section": new}}


def _mrope(sections: list[int]) -> Callable[[Kwargs, Kwargs], Kwargs]:
    # Qwen2-VL's and GLM-4V's text models split the rotary angles in (temporal, height, width)
    # sections that they default to in code when the config names none; shrunk, the sections
    # must add up to what the new head size gives (half of 16 for Qwen, 16 x 0.5 for GLM)
    def fix(values: Kwargs, out: Kwargs) -> Kwargs:
        rope = values.get("rope_parameters") or {}
        return {"rope_parameters": rope | {"mrope_section": sections}}

    return fix


def _mamba2(values: Kwargs, out: Kwargs) -> Kwargs:
    # Mamba-2 mixers hold expand x hidden channels in heads of head_dim: heads follow the width
    return {"num_heads": WIDTH * values["expand"] // out.get("head_dim", values["head_dim"])}


def _mamba_hybrid(values: Kwargs, out: Kwargs) -> Kwargs:
    # the same in Bamba's and Granite's hybrids, whose mixers have their own head size
    return {"mamba_d_head": HEAD_DIM, "mamba_n_heads": WIDTH * values["mamba_expand"] // HEAD_DIM}


def _forecaster(values: Kwargs, out: Kwargs) -> Kwargs:
    # the probabilistic forecasters need a horizon (no default) and one time feature to read
    return {"prediction_length": 8, "num_time_features": 1}


FIXES: dict[str, Callable[[Kwargs, Kwargs], Kwargs]] = {
    "qwen2_vl_text": _mrope([2, 3, 3]),
    "qwen2_5_vl_text": _mrope([2, 3, 3]),
    "glm4v_text": _mrope([2, 3, 3]),
    "glm_image_text": _mrope([2, 3, 3]),
    "glm4v_moe_text": _mrope([1, 1, 2]),
    "mamba2": _mamba2,
    # their defaults have no attention layer, and a model without one fails on its cache
    "bamba": lambda v, o: _mamba_hybrid(v, o) | {"attn_layer_indices": [1]},
    "granitemoehybrid": lambda v, o: (
        _mamba_hybrid(v, o) | {"layer_types": ["linear_attention", "full_attention"]}
    ),
    "recurrent_gemma": lambda v, o: {"block_types": ["recurrent", "attention"]},
    # Falcon-H1 and Nemotron-H size their Mamba mixers in heads of their own
    "falcon_h1": lambda v, o: {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16},
    "nemotron_h": lambda v, o: {"mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 1},
    # EfficientNet's default is B7 (width x2, depth x3.1): B0, whose blocks size its 1280-wide
    # head from the coefficients, so the head keeps B0's width
    "efficientnet": lambda v, o: {
        "width_coefficient": 1.0,
        "depth_coefficient": 1.0,
        "hidden_dim": 1280,
    },
    "autoformer": _forecaster,
    "informer": _forecaster,
    "time_series_transformer": _forecaster,
    # AST's positions are its spectrogram's frames; its default is 1024 of them
    "audio-spectrogram-transformer": lambda v, o: {"max_length": FRAMES},
    # DeepSeek-V2 routes to its default's unset number of experts per token
    "deepseek_v2": lambda v, o: {"num_experts_per_tok": 2},
    # GPT-Neo names its layers' attention as (pattern, repeats): one global, one local
    "gpt_neo": lambda v, o: {"attention_types": [[["global", "local"], 1]]},
    # Jamba places attention and experts every period layers from an offset: both in 2 layers
    "jamba": lambda v, o: {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
    },
    # Reformer's axial positions factor the sequence (4 x 8 = 32 tokens) and the width
    "reformer": lambda v, o: {"axial_pos_shape": [4, 8], "axial_pos_embds_dim": [32, 32]},
}
"""Per config type (``model_type``: sub-configs have their own), what the full shrink must
also set for the config to hold together, from its values and the overrides so far."""


def _rules(
    values: Kwargs, level: int, ids: dict[int, int], kind: str = "", fixed: bool = False
) -> Kwargs:
    """The overrides of one config's own values at ``level`` (an index of :data:`LEVELS`);
    :data:`FIXES` at the full shrink, or at any level if ``fixed``."""
    out = _local_rules(values)
    if level <= 2:
        out |= _layer_rules(values)
    if level <= 1:
        out |= _input_rules(values, ids)
    if level == 0:
        out |= _width_rules(values)
    if level == 0 or fixed:
        out |= FIXES[kind](values, out) if kind in FIXES else {}
    return out


def _defaults(cls: type) -> Kwargs:
    """A config class's declared defaults (a dataclass's fields, or ``__init__``'s)."""
    if dataclasses.is_dataclass(cls):
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out
    params = inspect.signature(cls).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _values(config: Any, keys: list[str]) -> Kwargs:
    """The config's values of ``keys``, those it can give: Gemma 4's per-layer attributes
    refuse to be read as one value."""
    out = {}
    for key in keys:
        with contextlib.suppress(Exception):
            out[key] = getattr(config, key)
    return out


def _resnet_backbone(timm: Any) -> Any:
    """transformers' own ResNet-50 for a timm ResNet-50 backbone (DETR's default): the same
    stages, built without timm."""
    from transformers import ResNetConfig

    return cast(Any, ResNetConfig)(out_indices=list(timm.out_indices or [1, 2, 3, 4]))


def shrink(
    config: Any, level: int = 0, ids: dict[int, int] | None = None, fixed: bool = False
) -> Any:
    """A new config of ``config``'s class, shrunk at ``level`` (:data:`LEVELS`), sub-configs
    too. A sub-config keeps what its composite set on it (a Llava's CLIP vision tower with
    patch 14), less what the level shrinks; values its class derives (``head_dim`` from the
    width, ``layer_types`` from the depth) are left for it to derive again. ``fixed`` applies
    :data:`FIXES` at any level (the same variant as the full shrink: EfficientNet's B0)."""
    ids = {} if ids is None else ids
    subs = set(getattr(config, "sub_configs", {}) or {})
    defaults = _defaults(type(config))
    values = _values(config, [k for k in defaults if k not in subs])
    kwargs = {k: v for k, v in values.items() if defaults[k] is not None and v != defaults[k]}
    kwargs |= _rules(values, level, ids, getattr(config, "model_type", ""), fixed)
    for name in sorted(subs):
        sub = getattr(config, name, None)
        if getattr(sub, "model_type", "") == "timm_backbone":
            sub = _resnet_backbone(sub)
        if hasattr(sub, "to_dict"):
            kwargs[name] = shrink(sub, level, ids, fixed)
        elif isinstance(sub, dict):
            kwargs[name] = sub | _rules(sub, level, ids, fixed=fixed)
    new = type(config)(**kwargs)
    extra = _std_rules(config, new) if level == 0 else {}
    return type(config)(**(kwargs | extra)) if extra else new


# --- inputs ------------------------------------------------------------------------------------

Maker = Callable[[torch.Generator], Batch]


def _find(config: Any, key: str, prefer: tuple[str, ...] = ()) -> Any:
    """``key``'s value in ``config`` or its sub-configs (those named in ``prefer`` first)."""
    if getattr(config, key, None) is not None:
        return getattr(config, key)
    subs = list(getattr(config, "sub_configs", {}) or {})
    for name in [*prefer, *(s for s in subs if s not in prefer)]:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            found = _find(sub, key, prefer)
            if found is not None:
                return found
    return None


def _special_ids(values: dict[str, Any]) -> set[int]:
    """Every token id a config dict names (bos, pad, image tokens ...), sub-configs too."""
    out: set[int] = set()
    for key, v in values.items():
        if isinstance(v, dict):
            out |= _special_ids(v)
        elif isinstance(key, str) and key.endswith(("token_id", "token_index", "token_ids")):
            out |= {x for x in (v if isinstance(v, list | tuple) else [v]) if _is_int(x)}
    return out


_TEXT = ("text_config", "encoder", "decoder", "text_encoder")
_VISION = ("vision_config", "backbone_config", "image_config", "vision_encoder")
_AUDIO = ("audio_config", "encoder_config", "encoder", "audio_encoder")


def _text(config: Any, image_tokens: int = 0) -> Maker:
    """Token ids (N, T) drawn from the vocabulary less the special tokens (an image token in
    text is an image the model was not given), T at most the model's positions; with
    ``image_tokens``, each row starts with that many of the config's image token."""
    vocab = _find(config, "vocab_size", _TEXT) or VOCAB
    positions = _find(config, "max_position_embeddings", _TEXT) or 0
    tokens = min(TOKENS, positions) if positions > 0 else TOKENS  # XLNet's -1: no limit
    special = _special_ids(config.to_dict())
    allowed = torch.tensor([i for i in range(min(vocab, VOCAB)) if i not in special])
    image = _image_token(config)
    length = image_tokens + tokens

    def make(g: torch.Generator) -> Batch:
        ids = allowed[torch.randint(len(allowed), (BATCH, length), generator=g)]  # (N, T)
        ids[:, :image_tokens] = image if image is not None else ids[:, :image_tokens]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    return make


def _image_token(config: Any) -> int | None:
    for key in ("image_token_id", "image_token_index"):
        found = _find(config, key)
        if _is_int(found):
            return int(found)
    return None


def _decoder(config: Any) -> Maker:
    vocab = _find(config, "vocab_size", ("decoder", *_TEXT)) or VOCAB

    def make(g: torch.Generator) -> Batch:
        ids = torch.randint(min(vocab, VOCAB) // 2, (BATCH, DECODER_TOKENS), generator=g)
        return {"decoder_input_ids": ids}  # (N, T')

    return make


def _tensor(name: str, shape: tuple[int, ...]) -> Maker:
    """``name``: a standard normal tensor of ``shape``."""
    return lambda g: {name: torch.randn(shape, generator=g)}


def _images(config: Any, name: str = "pixel_values") -> list[Maker]:
    """Pixels (N, C, H, W), then a clip (N, F, C, H, W); H = W = the config's image size, or
    64 (a convolutional model's stages halve it five times: 2 x 2 at the end)."""
    size = _find(config, "image_size", _VISION) or 64
    size = size[0] if isinstance(size, list | tuple) else size
    if size > MAX_IMAGE:
        raise ValueError(f"image size {size} > {MAX_IMAGE}: too large for the zoo's budget")
    channels = _find(config, "num_channels", _VISION) or 3
    frames = _find(config, "num_frames", _VISION) or 4
    clip = _tensor(name, (BATCH, frames, channels, size, size))
    if name.endswith("videos"):
        return [clip]
    return [_tensor(name, (BATCH, channels, size, size)), clip]


def _patches(config: Any, name: str, grid: str = "grid_thw") -> Maker:
    """Qwen2-VL-style vision towers take each image as its flattened patches, (N x h x w,
    C x T x P x P), and its grid (t, h, w) of patches: 4 x 4 patches an image."""
    channels = _find(config, "in_channels", _VISION) or _find(config, "num_channels", _VISION) or 3
    patch = _find(config, "patch_size", _VISION) or 14
    temporal = _find(config, "temporal_patch_size", _VISION) or 1
    side = 4

    def make(g: torch.Generator) -> Batch:
        flat = torch.randn(BATCH * side * side, channels * temporal * patch * patch, generator=g)
        return {name: flat, grid: torch.tensor([[1, side, side]] * BATCH)}

    return make


def _audio(config: Any, name: str) -> list[Maker]:
    """A waveform (N, samples), (N, 1, samples) for codecs; log-mel features as whisper takes
    them, (N, mels, 2 x positions), and as conformers and speech-to-text take them, (N, frames,
    features), and AST's (N, frames, mels)."""
    mels = _find(config, "num_mel_bins", _AUDIO) or 80
    positions = _find(config, "max_source_positions", _AUDIO)
    shapes: list[tuple[int, ...]] = [(BATCH, mels, 2 * positions if positions else FRAMES)]
    for key in ("num_mel_bins", "feature_projection_input_dim", "input_feat_per_channel"):
        features = _find(config, key, _AUDIO)
        shapes += [(BATCH, FRAMES, features)] if features else []
    if name == "input_values":
        shapes = [(BATCH, SAMPLES), (BATCH, 1, SAMPLES), *shapes[1:]]
    return [_tensor(name, s) for s in dict.fromkeys(shapes)]


def _series(config: Any) -> list[Maker]:
    """Time series: (N, L, channels) for PatchTST-like models; the past values, their time
    features and mask (and the future's) for the probabilistic forecasters; TimesFM's."""
    context = min(_find(config, "context_length") or 32, 64)  # TimesFM's default is 16384
    lags = _find(config, "lags_sequence") or [0]
    length = context + max(lags)
    channels = _find(config, "num_input_channels") or 1
    horizon = _find(config, "prediction_length") or 8
    features = _find(config, "num_time_features") or 0

    def forecaster(g: torch.Generator) -> Batch:
        return {
            "past_values": torch.randn(BATCH, length, generator=g),  # (N, L)
            "past_time_features": torch.randn(BATCH, length, features, generator=g),
            "past_observed_mask": torch.ones(BATCH, length),
            "future_values": torch.randn(BATCH, horizon, generator=g),  # (N, H)
            "future_time_features": torch.randn(BATCH, horizon, features, generator=g),
        }

    def padded(g: torch.Generator) -> Batch:  # TimesFM: a padding mask and a frequency class
        values = torch.randn(BATCH, context, generator=g)  # (N, L)
        return {
            "past_values": values,
            "past_values_padding": torch.zeros(BATCH, context),
            "freq": torch.zeros(BATCH, 1).long(),
        }

    return [_tensor("past_values", (BATCH, context, channels)), forecaster, padded]


def _with_image(model: nn.Module, config: Any) -> Maker:
    """A vision-language model's input: pixels (or flattened patches and their grid), and
    text that holds one image token per image feature the model makes of them (counted by its
    ``get_image_features``, on first use)."""
    takes = inspect.signature(model.forward).parameters
    grid = "image_grid_thw" in takes  # Qwen2-VL-like: flattened patches and their grid
    pixels = _patches(config, "pixel_values", "image_grid_thw") if grid else _images(config)[0]
    counted: list[Maker] = []

    def make(g: torch.Generator) -> Batch:
        if not counted:
            with torch.no_grad():
                x = pixels(torch.Generator().manual_seed(0))
                features = cast(Any, model).get_image_features(**x).pooler_output
            per_image = len(features[0]) if features[0].dim() == 2 else features.shape[0] // BATCH
            counted.append(_text(config, image_tokens=per_image))
        return counted[0](g) | pixels(g)

    return make


def _merge(*makers: Maker) -> Maker:
    return lambda g: {k: v for make in makers for k, v in make(g).items()}


_AUDIO_INPUTS = ("input_values", "input_features", "audio_mel")
_IMAGE_INPUTS = ("pixel_values", "pixel_values_videos")


def _main(model: nn.Module) -> str:
    """The input a model is named by: its ``main_input_name`` when ``forward`` takes it, else
    ``forward``'s first argument (a vision tower that inherits ``input_ids`` and takes
    ``pixel_values``)."""
    takes = list(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    main = main[0] if isinstance(main, list) else main
    return main if main in takes or not takes else takes[0]


def kind_of(model: nn.Module) -> str:
    """text, vision, audio, multimodal (two of them) or other, from the inputs ``forward``
    takes and the one it is named by."""
    takes = set(inspect.signature(model.forward).parameters)
    names = {"text": ("input_ids",), "vision": _IMAGE_INPUTS, "audio": _AUDIO_INPUTS}
    kinds = {k for k, inputs in names.items() if takes & set(inputs)}
    main = _main(model)
    if main == "hidden_states" and "grid_thw" in takes:
        return "vision"
    if len(kinds) > 1:
        return "multimodal"
    return kinds.pop() if kinds else "other"


def candidates(model: nn.Module, config: Any) -> list[Maker]:
    """The inputs to try, in order, from the model's main input and ``forward``'s signature:
    token ids (+ mask) for text; pixels (or a clip, or flattened patches) for vision; a
    waveform or a spectrogram for audio; past values for time series. A model that also takes
    a second modality gets both first (a CLIP-like dual encoder), then its main one alone, and
    an encoder-decoder gets decoder token ids."""
    takes = set(inspect.signature(model.forward).parameters)
    main = _main(model)
    if "grid_thw" in takes:
        out = [_patches(config, main)]
    elif main in _IMAGE_INPUTS:
        out = _images(config, main)
    elif main in _AUDIO_INPUTS:
        out = _audio(config, main)
    elif main == "past_values":
        out = _series(config)
    elif main == "input_ids":
        out = [_text(config)]
    else:
        out = []
    if main == "input_ids":
        others = _images(config) if "pixel_values" in takes else []
        others += [m for name in _AUDIO_INPUTS if name in takes for m in _audio(config, name)]
        vlm = hasattr(model, "get_image_features") and _image_token(config) is not None
        out = [_merge(out[0], other) for other in others] + [_with_image(model, config)] * vlm + out
    elif main in _IMAGE_INPUTS and "input_ids" in takes:
        out = [_merge(make, _text(config)) for make in out] + out
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in takes:
        out = [_merge(make, _decoder(config)) for make in out]
    if "qformer_input_ids" in takes:  # InstructBLIP's Q-Former reads the prompt too
        out = [_qformer(make) for make in out]
    return out


def _qformer(make: Maker) -> Maker:
    def both(g: torch.Generator) -> Batch:
        batch = make(g)
        return batch | ({"qformer_input_ids": batch["input_ids"]} if "input_ids" in batch else {})

    return both


def describe(batch: Batch) -> str:
    """``input_ids 8x32, pixel_values 8x3x64x64`` (attention masks left out)."""
    return ", ".join(
        f"{k} {'x'.join(str(s) for s in v.shape)}"
        for k, v in batch.items()
        if k != "attention_mask"
    )


# --- building a family -------------------------------------------------------------------------

OUTPUTS = ("logits", "last_hidden_state", "logits_per_image", "pooler_output")
"""The output fields read, the first the output has: the doctor's default (``logits``, else
``last_hidden_state``), then a dual encoder's similarity, then a pooled output."""


def _field(out: object) -> tuple[str | None, bool]:
    """The field of a ``ModelOutput`` the doctor should read, one that carries a gradient
    (``None``: not a mapping, or none does, and the doctor is left to say so), and whether it
    must be named (it is not the doctor's default)."""
    from normlab.doctor import OUTPUT_FIELDS

    if not isinstance(out, dict):
        return None, False
    tensors = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
    grads = [k for k in tensors if out[k].requires_grad]
    found = next((k for k in OUTPUTS if k in grads), None)
    found = found or next((k for k in grads if out[k].dim() >= 2), None)
    default = next((k for k in OUTPUT_FIELDS if k in tensors), None)
    return found, found is not None and found != default


def _model(
    family: str, level: int, seed: int, overrides: dict[str, Any] | None = None
) -> tuple[nn.Module, Any]:
    """The family's model at a shrink level, if it holds at most :data:`MAX_PARAMS` parameters
    (counted on the meta device first: a default config can hold billions); ``overrides``
    (dotted keys, ``vision_config.initializer_range``) set on the default config before it is
    shrunk, so they are shrunk as its own values are."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    default = CONFIG_MAPPING[family]()
    for key, value in (overrides or {}).items():
        *path, last = key.split(".")
        setattr(_resolve(default, path), last, value)
    config = shrink(default, level)
    cls = model_class(family)
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in cls(config).parameters())
    except Exception:  # some models cannot be built on meta: build only the smallest for real
        count = 0 if level == 0 else MAX_PARAMS + 1
    if count > MAX_PARAMS:
        raise ValueError(f"{count / 1e6:.0f}M parameters > {MAX_PARAMS / 1e6:.0f}M")
    torch.manual_seed(seed)
    model = cls(config)
    if level == 0:
        _keep_gains(model, cls, lambda: shrink(default, LEVELS.index("keep widths"), fixed=True))
    return model, config


def _fan_in(m: nn.Module) -> int | None:
    """The inputs each output of a torch Linear or convolution sums (a transposed
    convolution's, up to its stride: its weight is (in, out / groups, *kernel)); 1 for an
    embedding (an output is one row's entry) and a layer of one weight per unit (a norm's
    scale); ``None`` for other layers."""
    w = getattr(m, "weight", None)
    if isinstance(m, nn.Embedding) or (isinstance(w, torch.Tensor) and w.dim() == 1):
        return 1
    if not isinstance(w, torch.Tensor) or w.dim() < 2:
        return None
    if isinstance(m, nn.modules.conv._ConvTransposeNd):
        return w.numel() // w.shape[1] // m.groups
    return w.numel() // w.shape[0] if isinstance(m, nn.Linear | nn.modules.conv._ConvNd) else None


def _config_stds(model: nn.Module) -> dict[str, float]:
    """Each module's init std: its nearest own-or-ancestor's ``config`` std (:data:`INIT_STDS`),
    the config whose ``_init_weights`` draws it."""
    out: dict[str, float] = {}
    for name, m in model.named_modules():
        config = getattr(m, "config", None)
        own = next((v for k in INIT_STDS if isinstance(v := getattr(config, k, None), float)), None)
        std = own if own is not None else out.get(name.rpartition(".")[0]) if name else None
        if std is not None:
            out[name] = std
    return out


def _keep_gains(model: nn.Module, cls: type[nn.Module], wide: Callable[[], Any]) -> None:
    r"""Each torch Linear or convolution drawn at its config's std :math:`s` (its sample std
    within 4 standard errors, :math:`4 s / \sqrt{2 k}` for :math:`k` weights), of fan-in
    :math:`n` (:math:`n_0` at full width), rescaled to keep its gain at the config's own widths:
    std :math:`s_0 \sqrt{n_0 / n}`, for :math:`s \sqrt{n} = s_0 \sqrt{n_0}`. :math:`n_0` and
    :math:`s_0` are read from the same layer of ``wide()`` (the config shrunk but for its widths,
    with :data:`FIXES`: the same variant), built on the meta device.

    :func:`_init_rules` scales a config's std by its first width's shrink, which keeps the gain
    of the layers that read that width; a layer that reads another (SAM 3's FPN neck reads its
    1024-wide backbone, shrunk 16x, with the neck's own std, scaled for its 256-wide FPN, shrunk
    4x) keeps only half its gain, and three in a row 1/8. A layer whose fan-in did not shrink
    (a depthwise convolution's 9 inputs, a stem's 256 channels) goes back to :math:`s_0`: the
    config-level scaling would give it 4x its real gain (Canary's subsampling stem, std 0.02 at
    fan-in 9 and 256, gains 0.06 and 0.32, would hide a true collapse), and so does an
    embedding or a norm's scale drawn at the config's std (fan-in 1 at any width: its gain is
    its std; EfficientNet's BatchNorm weights drawn around 0). Layers drawn otherwise (He,
    Xavier, torch's default, a norm's scale at 1) are fan-in aware already and left alone."""
    try:
        with torch.device("meta"):
            full = dict(cls(wide()).named_modules())
    except Exception:  # a config that cannot be built wide keeps the config's rule alone
        return
    stds, stds_0 = _config_stds(model), _config_stds(full[""])
    with torch.no_grad():
        for name, m in model.named_modules():
            n, s, f = _fan_in(m), stds.get(name), full.get(name)
            n_0, s_0 = (_fan_in(f), stds_0.get(name)) if f is not None else (None, None)
            if not (n and n_0 and s and s_0) or (k := m.weight.numel()) < 2:
                continue
            if abs(float(m.weight.std()) / s - 1) < 4 / math.sqrt(2 * k):
                m.weight.mul_(s_0 * math.sqrt(n_0 / n) / s)


def _resolve(config: Any, path: list[str]) -> Any:
    """The (sub-)config at the dotted ``path`` of ``config``."""
    for name in path:
        config = getattr(config, name)
    return config


def _first_input(model: nn.Module, config: Any) -> tuple[Maker, tuple[str | None, bool]]:
    """The first candidate input the model runs on, and the output field to read: in training
    mode (as built), else in eval mode (a text-to-speech model that wants its targets in
    training)."""
    errors = []
    makers = candidates(model, config)
    for training in (True, False):
        model.train(training)
        for make in makers:
            try:
                out = model(**make(torch.Generator().manual_seed(0)))
                return make, _field(out)
            except Exception as exc:  # the next candidate; every model raises its own errors
                errors.append(_message(exc))
    raise ValueError(errors[0] if errors else "no input known for its forward signature")


def _notes(family: str, model: nn.Module, batch: Batch) -> list[str]:
    """What a reader of the table should know: a backbone swapped, eval mode, a multimodal
    model given only text."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[family]()
    subs = [getattr(config, n, None) for n in getattr(config, "sub_configs", {}) or {}]
    out = []
    if any(getattr(sub, "model_type", "") == "timm_backbone" for sub in subs):
        out.append("transformers' ResNet backbone in place of timm's (timm is not installed)")
    if not model.training:
        out.append("eval mode: the model refuses a forward pass in training mode without labels")
    takes = set(inspect.signature(model.forward).parameters)
    if "input_ids" in batch and takes & {"pixel_values", *_AUDIO_INPUTS} and len(batch) <= 2:
        out.append("text only: no image or audio input it takes could be made without a processor")
    return out


def build(family: str, seed: int = SEED, overrides: dict[str, Any] | None = None) -> Built | Row:
    """The family's model (seeded) and two input batches (from a generator seeded ``seed``),
    at the first shrink level that builds and runs; else its :class:`Row` saying why not.
    ``overrides`` are config values set before the shrink (:func:`_model`)."""
    import transformers

    transformers.logging.set_verbosity_error()  # config notes about small vocabularies
    row = Row(family, model_class=_class_name(family), skip=skip_reason(family))
    if row.skip:
        return row
    errors = []
    for level, name in enumerate(LEVELS):
        try:
            with warnings.catch_warnings():  # the models' own notes while they are built
                warnings.simplefilter("ignore")
                model, config = _model(family, level, seed, overrides)
                make, output = _first_input(model, config)
        except Exception as exc:  # the next level; record what each said
            errors.append(f"{name}: {_message(exc)}")
            continue
        row.tries = errors
        g = torch.Generator().manual_seed(seed)
        batches = [make(g), make(g)]
        row.kind, row.level, row.built = kind_of(model), name, True
        row.output, row.named = output
        row.training = model.training
        row.notes = _notes(family, model, batches[0])
        row.params = sum(p.numel() for p in model.parameters())
        row.input = describe(batches[0])
        return Built(row, model, batches)
    row.error = " | ".join(errors)
    return row


# --- diagnosing the zoo ------------------------------------------------------------------------


@dataclass(frozen=True)
class TrueAlarm:
    """A family whose standard init is degenerate by its config's own constant, so the doctor's
    alarm on it is true. Its evidence is checked on every run of the whole zoo: the default
    config holds ``value`` at ``key``; the doctor gives exactly ``labels``; the same family with
    ``key`` at :data:`SANE_STD` (shrunk as the config's own stds are, :func:`_init_rules`), or
    repaired by ``repair`` where the model's own init code misuses the constant (MobileViT's
    BatchNorm weights drawn around 0), is healthy: the alarm comes from the init, not from the
    architecture."""

    key: str  # dotted, from the family's config: ``vision_config.initializer_range``
    value: float
    labels: tuple[str, ...]  # Verdict.problems, in the doctor's order
    reason: str
    # the twin's change when it is not the constant at SANE_STD: applied to the built model
    repair: Callable[[nn.Module], None] | None = None


SANE_STD = 0.02
"""The init std the twin gets: transformers' usual ``initializer_range`` (the same configs'
text and mask-decoder parts use it), at the config's own width."""

_EPS_FLOOR = (
    "the vision tower's weights are drawn with std 1e-10 at width 768 (3.5e-10 at 64): its "
    "patch embedding puts out ~1e-8 of the pixels' scale, 3e-6 of the sqrt(eps) = 3.2e-3 of the "
    "LayerNorm it feeds, which then divides by sqrt(eps), not the std, and passes on ~3e-6 of "
    "unit scale: the tower's signal is gone at init"
)
_CPMANT = (
    "every nn.Linear is drawn with std 1.0, a gain of sqrt(fan_in) a layer: at the config's own "
    "width 4096 (feed-forward 10240) w_0 and w_1 each give 64x a norm's output, their gated "
    "product 2.9e3x and w_out 3e5x, the same gains as the zoo's width 64 at std 8 = "
    "1.0 sqrt(4096/64); each pre-norm block adds a branch ~3e3x its stream"
)
_BN_AT_ZERO = (
    "the model's own _init_weights draws every BatchNorm2d's weight from N(0, "
    "initializer_range = 0.02) instead of torch's 1: each BatchNorm puts out ~0.016 of unit "
    "scale, the next convolution's ~6e-4 falls under the next BatchNorm's sqrt(eps) = 3.2e-3, "
    "and the scale compounds down; trained 60 steps on a fixed batch (4 classes) mobilevit "
    "goes 1.387 -> 1.356 with SGD 0.1 (0.823 with AdamW 1e-3), its twin with BatchNorm "
    "weights 1 to 0.0000 (0.0003)"
)


def _batchnorm_weights_one(model: nn.Module) -> None:
    """torch's own BatchNorm init: weight 1 (bias, running statistics as they are: 0, 0, 1)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.weight is not None:
                m.weight.fill_(1.0)


_ZERO_CODEBOOK = (
    "the model's own _init_weights fills every codebook of the residual quantizer with zeros "
    "(the `embed` buffers, marked `inited` so no k-means fills them; no gradient reaches a "
    "buffer): every frame is coded 0, the decoder's fc2 reads zeros on the only path to "
    "audio_values (fc2 and acoustic_decoder.conv1 0 on every unit), so the output is a "
    "constant: two different inputs give bit-identical audio_values (std 0.0029, the biases'), "
    "and no gradient reaches the encoder through the argmax; the twin with each codebook's rows "
    "drawn N(0, 1) (as a k-means of live features would fill them) gives an output that "
    "depends on the input and is healthy. The frozen semantic model (torch.no_grad) is not "
    "judged either way"
)


def _codebooks_drawn(model: nn.Module) -> None:
    """Each all-zero codebook buffer (``...codebook.embed``) drawn N(0, 1) (generator seeded
    :data:`SEED`): codes that depend on the input, as a k-means init would give."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("codebook.embed") and not buf.any():
                buf.normal_(generator=g)


_VOCODER_CHAIN = (
    "the vocoder's signal path is a chain of plain (non-residual) convolutions drawn by the "
    "default _init_weights at the config's initializer_range = 0.01, each a gain of "
    "0.01 sqrt(effective fan-in) (a transposed conv's in*k/stride) times the leaky ReLU's ~0.71: "
    "{chain}; the residual blocks between them pass the stream on (x + a std-0.01 branch). The "
    "model as built carries no weight norm (apply_weight_norm is the training script's call, "
    "and it sets g = |w|: the same forward). The twin at He init (effective fan-in) on those "
    "convolutions only is healthy; {training}"
)
_UNIVNET = _VOCODER_CHAIN.format(
    chain="conv_pre 0.01 sqrt(64*7) = 0.21x, each convt_pre 0.01 sqrt(32*16/8) * 0.72 = "
    "0.058x, conv_post 0.11x: the waveform before its tanh is 0.0018x the noise input; the "
    "kernel predictor's flags are that segment's (the twin leaves it at std 0.01, unflagged)",
    training="but Adam makes up for the scale: regressing a fixed batch (2 x 16 frames of random "
    "mel) onto a 440 Hz tone whose amplitude follows each frame's mean mel (MSE, Adam 2e-4, "
    "target variance 0.034), the given init reaches 0.0053 at step 40 and 0.0000 at 200, the "
    "twin (its output 0.56 against the target's 0.18) 0.031 and 0.0002: the alarm is the "
    "doctor's definition (< 0.01x), not a slower start under Adam",
)
_HIFIGAN = _VOCODER_CHAIN.format(
    chain="the upsamplers 0.01 sqrt(512*16/8) * 0.71 = 0.23x, 0.16x, 0.11x, 0.08x and "
    "conv_post 0.11x: the waveform is 7.1e-6x the decoder's last norm; PyTorch's default init "
    "is no better here (it takes a transposed conv's fan-in as out*k, 256*16: std 0.009, "
    "upsampler 0 still 0.2x)",
    training="on the same proxy (the vocoder alone, a fixed batch of 2 x 16 random mel frames "
    "onto a 440 Hz tone whose amplitude follows each frame's mean mel; MSE, Adam 2e-4, target "
    "variance 0.035) the given init reaches 0.0013 at step 40, 0.0004 at 80 and 0.0001 at 200, "
    "the twin 0.0012 and 0.0000 at 80",
)


def _signal_path_he(model: nn.Module) -> None:
    """He init, std sqrt(2 / effective fan-in), for the vocoder's non-residual convolutions
    (``conv_pre``, each ``convt_pre`` or ``upsampler``, ``conv_post``); a transposed
    convolution's output sums in_channels * kernel / stride inputs. He et al. 2015, the gain of
    ReLU (the slopes 0.1 and 0.2 of the leaky ReLUs change it by under 2%)."""
    for name, m in model.named_modules():
        *_, parent, leaf = ["", *name.split(".")]
        if not isinstance(m, nn.Conv1d | nn.ConvTranspose1d):
            continue
        if leaf not in ("conv_pre", "convt_pre", "conv_post") and parent != "upsampler":
            continue
        k = m.weight.shape[2]
        if isinstance(m, nn.ConvTranspose1d):
            fan = m.in_channels // m.groups * k / m.stride[0]
        else:
            fan = m.in_channels // m.groups * k
        with torch.no_grad():
            m.weight.normal_(0.0, (2.0 / fan) ** 0.5)


_STEM = (
    "the default _init_weights draws every convolution and linear at initializer_range = 0.02, "
    "also the subsampling stem's, whose fan-ins do not grow with the model: 3x3 convolutions "
    "(the first and each depthwise one) at fan-in 9 are a gain of 0.06, the 256-input pointwise "
    "ones 0.32, and the linear after them 0.02 sqrt(4096) = 1.28; built at its own widths "
    "(layers cut to 2) the stem takes the features from rms 1.0 to {out}, under the sqrt(eps) "
    "= 3.2e-3 of the first LayerNorm, which then divides by sqrt(eps), not the std: {verdict}. "
    "The twin with the stem at torch's default init (a gain of 0.58 a layer at any width) "
    "puts out {twin} and is healthy at its own widths too"
)
_BN_EFFICIENTNET = (
    "as MobileViT, the model's own _init_weights draws every BatchNorm2d's weight from N(0, "
    "initializer_range = 0.02) instead of torch's 1, against a batch_norm_eps of 1e-3 "
    "(sqrt 0.032): built at its own widths (63.8M parameters) blocks.0's depthwise_norm puts out "
    "0.00039x unit scale, blocks.3's project_bn 1e-8x, blocks.6's 4e-14x; the twin with "
    "BatchNorm weights 1 is healthy at its own widths too"
)


def _stem_default_init(model: nn.Module) -> None:
    """torch's own init (``reset_parameters``: Kaiming-uniform with a = sqrt(5), std
    1 / sqrt(3 fan_in), a gain of 0.58 a layer at any width) for the convolutions and the
    linear of each subsampling stem (the modules under one named ``subsampling``)."""
    for name, m in model.named_modules():
        if "subsampling." in name and isinstance(m, nn.Linear | nn.modules.conv._ConvNd):
            m.reset_parameters()


TRUE_ALARMS: dict[str, TrueAlarm] = {
    "mobilevit": TrueAlarm(
        "initializer_range", 0.02, ("vanishing",), _BN_AT_ZERO, _batchnorm_weights_one
    ),
    "mobilevitv2": TrueAlarm(
        "initializer_range", 0.02, ("vanishing",), _BN_AT_ZERO, _batchnorm_weights_one
    ),
    "blip": TrueAlarm(
        "vision_config.initializer_range", 1e-10, ("vanishing", "exploding"), _EPS_FLOOR
    ),
    "got_ocr2": TrueAlarm("vision_config.initializer_range", 1e-10, ("vanishing",), _EPS_FLOOR),
    "sam": TrueAlarm(
        "vision_config.initializer_range", 1e-10, ("vanishing", "exploding"), _EPS_FLOOR
    ),
    "sam_hq": TrueAlarm(
        "vision_config.initializer_range", 1e-10, ("vanishing", "exploding"), _EPS_FLOOR
    ),
    "sam_vision_model": TrueAlarm("initializer_range", 1e-10, ("vanishing",), _EPS_FLOOR),
    "sam_hq_vision_model": TrueAlarm("initializer_range", 1e-10, ("vanishing",), _EPS_FLOOR),
    "cpmant": TrueAlarm("init_std", 1.0, ("exploding",), _CPMANT),
    "xcodec": TrueAlarm(
        "initializer_range", 0.02, ("vanishing", "dead"), _ZERO_CODEBOOK, _codebooks_drawn
    ),
    "univnet": TrueAlarm("initializer_range", 0.01, ("vanishing",), _UNIVNET, _signal_path_he),
    "fastspeech2_conformer_with_hifigan": TrueAlarm(
        "vocoder_config.initializer_range", 0.01, ("vanishing",), _HIFIGAN, _signal_path_he
    ),
    "canary": TrueAlarm(
        "encoder_config.initializer_range",
        0.02,
        ("vanishing",),
        _STEM.format(
            out="9.2e-6", verdict="the LayerNorm puts out 0.0031x unit scale", twin="rms 0.050"
        ),
        _stem_default_init,
    ),
    "cohere_asr": TrueAlarm(
        "encoder_config.initializer_range",
        0.02,
        ("vanishing",),
        _STEM.format(
            out="9.1e-6", verdict="the LayerNorm puts out 0.0029x unit scale", twin="rms 0.050"
        ),
        _stem_default_init,
    ),
    "nemotron_asr_streaming": TrueAlarm(
        "encoder_config.initializer_range",
        0.02,
        ("vanishing",),
        _STEM.format(
            out="7.1e-6",
            verdict="every stem layer flagged (its encoder, built alone)",
            twin="rms 0.044",
        ),
        _stem_default_init,
    ),
    "nemotron_asr_streaming_encoder": TrueAlarm(
        "initializer_range",
        0.02,
        ("vanishing",),
        _STEM.format(out="7.1e-6", verdict="every stem layer flagged", twin="rms 0.044"),
        _stem_default_init,
    ),
    "nemotron3_5_asr": TrueAlarm(
        "encoder_config.initializer_range",
        0.02,
        ("vanishing",),
        _STEM.format(out="7.1e-6", verdict="every stem layer flagged", twin="rms 0.048"),
        _stem_default_init,
    ),
    "efficientnet": TrueAlarm(
        "initializer_range", 0.02, ("vanishing",), _BN_EFFICIENTNET, _batchnorm_weights_one
    ),
}
"""Families whose standard init is degenerate by their config's own constant (the doctor's
alarm is true; an ``exploding`` after a collapsed tower is the projection read against the
collapsed norm it follows). Checked by ``tests/test_hfzoo.py``."""


def config_value(family: str, key: str) -> Any:
    """The value at the dotted ``key`` of the family's default config."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    *path, last = key.split(".")
    return getattr(_resolve(CONFIG_MAPPING[family](), path), last)


def twin(family: str, seed: int = SEED) -> Built | Row:
    """A family of :data:`TRUE_ALARMS` built with its degenerate constant at :data:`SANE_STD`,
    or built as it is and then repaired (:attr:`TrueAlarm.repair`)."""
    alarm = TRUE_ALARMS[family]
    if alarm.repair is None:
        return build(family, seed, overrides={alarm.key: SANE_STD})
    built = build(family, seed)
    if isinstance(built, Built):
        alarm.repair(built.model)
    return built


@dataclass
class Verdict:
    """What the doctor said of one built family at standard init."""

    row: Row
    problems: list[str] = field(default_factory=list)  # [] healthy
    # each flagged layer: its name, labels and the criteria that gave them
    flagged: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    refused: str | None = None  # the doctor raised: a doctor bug, not a skip
    warned: list[str] = field(default_factory=list)  # the doctor's own warnings
    seconds: float = 0.0  # the diagnosis's wall time

    @property
    def summary(self) -> str:
        if self.refused:
            return "refused"
        return ", ".join(self.problems) if self.problems else "healthy"

    @property
    def true_alarm(self) -> bool:
        """The labels :data:`TRUE_ALARMS` expects of this family (a degenerate init)."""
        alarm = TRUE_ALARMS.get(self.row.family)
        return alarm is not None and self.refused is None and tuple(self.problems) == alarm.labels


def diagnose(built: Built, seed: int = SEED) -> Verdict:
    """:func:`normlab.doctor.diagnose` on the family's two batches, the readout drawn from a
    generator seeded ``seed``, reading the row's output field (``None``: the doctor's
    default); a refusal is recorded with its message."""
    from normlab import doctor

    verdict = Verdict(built.row)
    g = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    try:
        output = built.row.output if built.row.named else None
        with warnings.catch_warnings(record=True) as caught:  # the model's, and the doctor's
            warnings.simplefilter("always")
            d = doctor.diagnose(built.model, built.batches, generator=g, output=output)
        verdict.warned = sorted({str(w.message) for w in caught if "normlab" in w.filename})
    except Exception as exc:  # ModelInputError, ModelOutputError, CannotDiagnose, or a crash
        verdict.refused = _message(exc, limit=400)
    else:
        verdict.problems = list(d.problems)
        verdict.flagged = [
            (x.name, [y for y in x.labels if y != "ok"], x.criteria())
            for x in d.layers
            if any(y != "ok" for y in x.labels)
        ]
    verdict.seconds = time.perf_counter() - start
    return verdict


COMMAND = "python -m tests.hfzoo --write docs/zoo.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flagged(v: Verdict) -> str:
    """``name`` (labels: criteria; ...), one layer after another; a true alarm's reason first."""
    if v.refused:
        return _cell(v.refused)
    lines = [f"`{name}`: {_cell('; '.join(why))}" for name, _, why in v.flagged]
    if v.true_alarm:
        alarm = TRUE_ALARMS[v.row.family]
        lines.insert(0, f"true alarm, `{alarm.key}` = {alarm.value:g}: {_cell(alarm.reason)}")
    return "<br>".join(lines)


def _verdict(v: Verdict) -> str:
    return f"true alarm: {v.summary}" if v.true_alarm else v.summary


def table(verdicts: list[Verdict], rows: list[Row], seconds: float) -> str:
    """The markdown page: counts, the command, the built families with their verdicts, the
    skipped ones with their reasons, the failed ones with their errors."""
    built = [v.row for v in verdicts]
    skipped = [r for r in rows if r.status == "skipped"]
    failed = [r for r in rows if r.status == "failed"]
    counts = {s: sum(v.summary == s for v in verdicts) for s in ("healthy", "refused")}
    true = sum(v.true_alarm for v in verdicts)
    alarms = len(verdicts) - counts["healthy"] - counts["refused"] - true
    lines = [
        "# The transformers zoo at standard init",
        "",
        f"Generated by `{COMMAND}` (`make calibrate`) with transformers "
        f"{_version('transformers')} and torch {torch.__version__}, seed {SEED}: every family "
        "`AutoModel` builds, shrunk to fit the CPU and diagnosed by `normlab.doctor.diagnose` "
        "at its standard init, where a healthy verdict is the truth (see `tests/hfzoo.py`).",
        "",
        f"{len(rows)} families: {len(built)} built, {len(skipped)} skipped, {len(failed)} failed "
        f"to build. Of the built: {counts['healthy']} healthy, {alarms} with a false alarm, "
        f"{true} with a true alarm (a standard init broken by its own constants or init code, "
        f"its twin with a sane init healthy: `TRUE_ALARMS`), {counts['refused']} refused by "
        f"the doctor. Diagnosis time {seconds:.0f} s in all.",
        "",
        "## Built",
        "",
        "| family | kind | class | params | input | output | level | verdict | flagged layers |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    for v in verdicts:
        r = v.row
        output = f"`{r.output}`" + (" (named)" if r.named else "") if r.output else "-"
        lines.append(
            f"| `{r.family}` | {r.kind} | {r.model_class} | {r.params:,} | {r.input} | {output} "
            f"| {r.level} | {_verdict(v)} | {_flagged(v)} |"
        )
    lines += ["", "## Skipped", "", "| family | class | reason |", "|---|---|---|"]
    lines += [f"| `{r.family}` | {r.model_class} | {_cell(r.skip or '')} |" for r in skipped]
    lines += ["", "## Failed to build", "", "| family | class | error at each level |"]
    lines += ["|---|---|---|"]
    lines += [f"| `{r.family}` | {r.model_class} | {_cell(r.error or '')} |" for r in failed]
    notes = [r for r in built if r.notes]
    lines += ["", "## Notes", ""] + [f"- `{r.family}`: {'; '.join(r.notes)}" for r in notes]
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def main(argv: list[str] | None = None) -> int:
    """Build and diagnose every family (or ``--only`` some), print one line each as it goes
    and the alarms at the end, and write the markdown table (``--write``)."""
    parser = argparse.ArgumentParser(prog="python -m tests.hfzoo", description=__doc__)
    parser.add_argument("--write", metavar="FILE", help="write the markdown table to FILE")
    parser.add_argument("--only", metavar="FAMS", help="comma-separated families (default all)")
    args = parser.parse_args(argv)
    names = families()
    if args.only:
        unknown = sorted(set(args.only.split(",")) - set(names))
        if unknown:
            parser.error(f"--only: unknown families {unknown}, use names from MODEL_MAPPING_NAMES")
        names = args.only.split(",")
    _quiet()
    rows, verdicts = [], []
    for name in names:
        start = time.perf_counter()
        built = build(name)
        row = built.row if isinstance(built, Built) else built
        rows.append(row)
        if isinstance(built, Built):
            verdicts.append(diagnose(built))
            del built  # one model in memory at a time
        _report(row, verdicts[-1] if row.built else None, time.perf_counter() - start)
    seconds = sum(v.seconds for v in verdicts)
    print(f"\n{len(rows)} families, {len(verdicts)} built; diagnosis {seconds:.1f} s in all")
    for v in verdicts:
        if v.summary != "healthy":
            what = "TRUE ALARM" if v.true_alarm else "ALARM"
            print(f"{what} {v.row.family}: {v.summary}: {_flagged(v).replace('<br>', ' / ')}")
    if args.write:
        with open(args.write, "w") as f:
            f.write(table(verdicts, rows, seconds))
    return 0


def _report(row: Row, verdict: Verdict | None, seconds: float) -> None:
    what = row.skip or row.error or ""
    if verdict is not None:
        what = f"{verdict.summary} ({verdict.seconds:.2f} s diagnose) {row.input}"
    print(f"{row.family:40s} {row.status:8s} {row.kind:10s} {seconds:6.1f} s  {what}", flush=True)


def _quiet() -> None:
    """Quiet logs and one thread: the zoo's tiny models gain nothing from a second thread and
    lose 10x and more to one on a loaded machine (distilbert: 0.6 s against 7 s)."""
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()


if __name__ == "__main__":
    sys.exit(main())
