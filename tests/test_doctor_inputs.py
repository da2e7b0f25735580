"""The doctor's input side: every model that runs on its input is traced (an audio encoder that
sets ``requires_grad`` on a view of its input too), and the models and inputs it cannot examine
are refused with their cause and the flag to use: a model on the meta device, a half-precision
model given float32, a quantized model, token ids out of an embedding's range. Outputs are read
as the model makes them: a length it predicts from its input, a tuple of feature maps read
whole. Library calls and ``normlab doctor`` (exit status 2, one line)."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import warnings
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from normlab import cli, doctor
from normlab.doctor.graph import trace
from normlab.doctor.running import _output

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a download


def counted(model: nn.Module) -> list[int]:
    """A list that grows by one at every call of ``model``'s forward."""
    calls: list[int] = []
    model.register_forward_pre_hook(lambda m, args: calls.append(1))
    return calls


# -- (1) a model that refuses an input requiring grad is traced on the input as given ------------


class SetsGrad(nn.Module):
    """Makes a view of its input require grad, as Wav2Vec2's and HuBERT's feature encoders do in
    training mode: allowed on the input as given (a leaf), refused on one requiring grad."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.lin = nn.Linear(6, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = x.view(x.shape)
        if self.training:
            h.requires_grad = True
        return self.lin(self.act(h))


def test_a_model_that_refuses_a_grad_requiring_input_is_traced_as_given() -> None:
    model, x = SetsGrad(), torch.randn(16, 6)
    graph = trace(model, x)
    assert graph.producers["lin"] == ["act"]  # the view it made require grad leaves a graph
    d = doctor.diagnose(model, x)
    assert [la.name for la in d.layers] == ["act", "lin"]


def test_a_model_that_takes_one_is_traced_through_its_parameter_free_first_layer() -> None:
    """Only a refusal makes the doctor fall back: otherwise the input requires grad, and a
    first layer without parameters (a ReLU) is found in the graph, as it is read from."""
    model = nn.Sequential(nn.ReLU(), nn.Linear(6, 3))
    assert trace(model, torch.randn(16, 6)).producers["1"] == ["0"]


def test_a_model_that_refuses_both_inputs_says_its_own_error() -> None:
    class Refuses(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise ValueError("not on a Tuesday")

    with pytest.raises(doctor.ModelInputError) as info:
        doctor.diagnose(Refuses(), torch.randn(4, 6))
    assert str(info.value) == (
        "the model rejected input of shape (4, 6): ValueError: not on a Tuesday"
    )


def _audio(family: str) -> nn.Module:
    from transformers import HubertConfig, HubertModel, Wav2Vec2Config, Wav2Vec2Model

    small = {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "conv_dim": (16, 16, 16), "conv_stride": (5, 2, 2),
        "conv_kernel": (10, 3, 3), "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 2, "layerdrop": 0.0,  # every layer, every pass
    }  # fmt: skip
    torch.manual_seed(0)
    if family == "wav2vec2":
        return Wav2Vec2Model(Wav2Vec2Config(**small)).train()
    return HubertModel(HubertConfig(**small)).train()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["wav2vec2", "hubert"])
def test_an_audio_encoder_fed_raw_waveforms_is_diagnosed(family: str) -> None:
    """Issue 30: "the model rejected input of shape (8, 4000): RuntimeError: you can only change
    requires_grad flags of leaf variables", an error the model itself does not raise."""
    model = _audio(family)
    x = torch.randn(8, 4000, generator=torch.Generator().manual_seed(0))
    model(x)  # the model runs on its input
    with pytest.raises(RuntimeError, match="requires_grad flags of leaf variables"):
        model(x.clone().requires_grad_(True).clone())  # and refuses one requiring grad
    graph = trace(model, x)
    convs = [f"feature_extractor.conv_layers.{i}.conv" for i in range(3)]
    assert all(name in graph.consumers for name in convs)  # the encoder's chain, traced
    d = doctor.diagnose(model, x)
    names = [la.name for la in d.layers]
    assert set(convs) <= set(names) and "encoder.layers.1.final_layer_norm" in names
    assert all(la.act_std > 0 for la in d.layers if la.name in convs)


# -- (2) outputs as the model makes them: a length it predicts, tuples of tensors ----------------


class Durations(nn.Module):
    """A length regulator (FastSpeech's): each of T tokens repeated by a duration the model
    predicts from its values, so the output's length, the longest sum of durations in the
    batch, changes from batch to batch. The durations are detached, as the predictor is
    trained on its own targets; the frames take the gradient."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Linear(width, width)
        self.duration = nn.Linear(width, 1)
        self.decoder = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.tanh(self.encoder(x))  # (N, T, D)
        frames = self.duration(h).squeeze(-1).detach().exp().round().clamp(1, 4).long()  # (N, T)
        y = [hi.repeat_interleave(fi, dim=0) for hi, fi in zip(h, frames, strict=True)]
        return self.decoder(nn.utils.rnn.pad_sequence(y, batch_first=True))  # (N, L, D)


def _durations() -> tuple[nn.Module, list[Tensor]]:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 12, 16, generator=g) for _ in range(2)]  # (N, T, D) each
    torch.manual_seed(0)
    return Durations(), xs


def test_a_model_whose_output_length_varies_with_its_input_is_measured() -> None:
    """FastSpeech2-Conformer was refused: "the model's backward pass raised RuntimeError: The
    size of tensor a (50) must match the size of tensor b (44)", the first pass's readout
    applied to the second pass's output. Each output shape gets its own readout."""
    model, xs = _durations()
    lengths = [model(x).shape[1] for x in xs]
    assert lengths[0] != lengths[1]  # the case itself: two batches, two lengths
    for x in xs:  # the model's own forward and backward do not raise
        y = model(x)
        (y * torch.randn(y.shape)).sum().backward()
    d = doctor.diagnose(model, xs, generator=torch.Generator().manual_seed(0))
    assert d.steps == 2 and [la.name for la in d.layers] == ["encoder", "duration", "decoder"]
    ratio = {la.name: la.grad_ratio for la in d.layers}
    assert ratio["encoder"] > 0 and ratio["decoder"] == 1.0  # both steps' gradients, measured
    assert math.isnan(ratio["duration"])  # detached: no gradient reaches it, as in the model


@pytest.mark.slow
def test_the_training_trial_of_such_a_model_draws_a_target_per_length() -> None:
    """Training changes the predicted durations, so one batch's output length changes from
    step to step; the trial's target is drawn per batch and output shape."""
    model, xs = _durations()
    e = doctor.examine(model, xs, fix="he", generator=torch.Generator().manual_seed(0))
    assert e.trial is not None and all(math.isfinite(v) for v in e.trial.after)


class Stages(nn.Module):
    """Three stride-2 convolution stages (channels 3 -> 8 -> 16 -> 32, BatchNorm, ReLU), each
    stage's output returned, as a backbone's feature maps are: wrapped by ``wrap``."""

    def __init__(self, wrap: Any) -> None:
        super().__init__()
        chans, self.wrap = [3, 8, 16, 32], wrap
        self.stages = nn.ModuleList(
            nn.Sequential(nn.Conv2d(a, b, 3, stride=2, padding=1), nn.BatchNorm2d(b), nn.ReLU())
            for a, b in itertools.pairwise(chans)
        )

    def forward(self, x: Tensor) -> Any:
        maps = []
        for stage in self.stages:
            x = stage(x)
            maps.append(x)  # (N, C_k, H / 2^k, W / 2^k)
        return self.wrap(maps)


def _backbone_output(maps: list[Tensor]) -> Any:
    from transformers.modeling_outputs import BackboneOutput

    return BackboneOutput(feature_maps=tuple(maps))  # hidden_states, attentions None: dropped


ONLY = "its only field that holds tensors, feature_maps,"
WHOLE = {  # kind: (how the maps are returned, where the note says they were found)
    "BackboneOutput": (_backbone_output, f"BackboneOutput; {ONLY}"),
    "dict": (lambda maps: {"feature_maps": tuple(maps)}, f"dict; {ONLY}"),
    "logits": (  # MGP-STR's three heads: the default field, a tuple
        lambda maps: {"logits": tuple(maps), "note": "heads"},
        "dict; its field logits",
    ),
    "nested tuple": (lambda maps: (tuple(maps),), "tuple; its first element"),  # to_tuple()
    "list": (list, "list; it"),  # timm's features_only
}


def _stages(wrap: Any) -> doctor.Diagnosis:
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return doctor.diagnose(Stages(wrap), x, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", list(WHOLE))
def test_an_output_holding_a_tuple_of_feature_maps_is_read_whole(kind: str) -> None:
    """HGNetV2's backbone (feature maps) and MGP-STR (logits of three heads) were refused:
    "the model returned BackboneOutput with tensor fields []: name one with output=". Every
    map is read, so every stage's layers get a gradient, and the notes say so."""
    wrap, where = WHOLE[kind]
    d = _stages(wrap)
    assert len(d.layers) == 9 and all(la.grad_std > 0 for la in d.layers)
    shapes = "[(8, 8, 16, 16), (8, 16, 8, 8), (8, 32, 4, 4)]"
    assert d.notes[0] == (
        f"the model returned {where} holds 3 tensors of shapes {shapes}: the readout reads "
        "every one of them"
    )


def test_the_joined_readout_is_the_sum_of_a_readout_of_each_map() -> None:
    """:math:`r \\cdot \\mathrm{cat}_k(y_k) = \\sum_k r_k \\cdot y_k`: the same elements
    summed in another order, float64 (|error| ~ 1e-16 x the sum of |terms|, under 1e-12)."""
    g = torch.Generator().manual_seed(0)
    maps = [torch.randn(4, c, s, s, generator=g, dtype=torch.float64) for c, s in [(2, 8), (4, 4)]]
    joined, _ = _output({"feature_maps": tuple(maps)}, None)
    assert joined.shape == (4, 2 * 64 + 4 * 16)
    r = torch.randn(joined.shape, generator=g, dtype=torch.float64)
    parts = r.split([2 * 64, 4 * 16], dim=1)
    each = sum((p.reshape(y.shape) * y).sum() for p, y in zip(parts, maps, strict=True))
    assert float((r * joined).sum()) == pytest.approx(float(each), abs=1e-12)


def test_a_tuple_s_first_element_is_read_and_the_rest_is_named() -> None:
    """A plain tuple is (output, extras), as nn.LSTM's (output, (h, c)): its first element is
    read; the notes say the stages that feed only the others got no gradient, and how to read
    them all."""
    d = _stages(tuple)
    grad = {la.name: la.grad_std for la in d.layers}
    assert all(grad[f"stages.0.{i}"] > 0 for i in range(3))
    assert all(math.isnan(grad[f"stages.{k}.{i}"]) for k in (1, 2) for i in range(3))
    assert any("first element was read" in n and "not the 2 tensor(s) after it" in n
               for n in d.notes)  # fmt: skip


def test_a_mapping_s_only_tensor_field_is_read_and_several_must_be_named() -> None:
    only = _stages(lambda maps: {"last": maps[-1]})
    assert "the model returned dict; its only field that holds tensors, last, was read" in (
        only.notes
    )
    with pytest.raises(doctor.ModelOutputError, match=r"tensor fields \['a', 'b'\]: name one"):
        _stages(lambda maps: {"a": maps[0], "b": maps[-1]})


def test_an_output_with_no_tensor_names_the_cause_and_the_flag() -> None:
    with pytest.raises(doctor.ModelOutputError) as info:
        _stages(lambda maps: {"feature_maps": (), "label": "cat"})
    assert str(info.value) == (
        "the model returned dict with no tensor in its fields ['feature_maps (tuple)', "
        "'label (str)']: return the scores as a tensor or a tuple of tensors, in a field that "
        "output= names"
    )
    with pytest.raises(doctor.ModelOutputError, match=r"shapes \[\(8, 8, 16, 16\), \(16,\)\]"):
        _stages(lambda maps: {"feature_maps": (maps[0], maps[0][0, :, 0, 0].repeat(2))})


# -- (3) refused before any pass, with the cause and the flag -------------------------------------


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def test_a_meta_model_is_refused_with_how_to_materialize_it() -> None:
    with torch.device("meta"):
        model = mlp()
    calls = counted(model)
    with pytest.raises(doctor.CannotDiagnose) as info:
        doctor.diagnose(model, torch.randn(8, 8))
    assert str(info.value) == (
        "the model is on the meta device: model[0].weight has a shape but no values; "
        "materialize it first: model.to_empty(device='cpu'), then initialize the weights "
        "(each layer's reset_parameters(), or load_state_dict)"
    )
    assert calls == []  # before any pass
    model.to_empty(device="cpu")
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.reset_parameters()
    assert doctor.diagnose(model, torch.randn(8, 8)).layers  # the advice works


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_given_float32_names_the_dtype_and_the_flag(
    dtype: torch.dtype,
) -> None:
    model, name = mlp().to(dtype), str(dtype).removeprefix("torch.")
    with pytest.raises(doctor.ModelInputError) as info:
        doctor.diagnose(model, torch.randn(8, 8))
    said = str(info.value)
    assert said.startswith(
        f"the model's parameters are {name} and the input float32: give a {name} input "
        f"(--dtype {name}); the model rejected input of shape (8, 8): RuntimeError: "
    )
    d = doctor.diagnose(model, torch.randn(8, 8).to(dtype))  # torch 2.13 runs both on the CPU
    assert all(la.finite and la.act_std > 0 for la in d.layers)


def test_a_half_precision_op_with_no_cpu_kernel_says_to_use_float32() -> None:
    class Distances(nn.Module):  # torch.cdist has no float16 kernel on the CPU (torch 2.13)
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x: Tensor) -> Tensor:
            h = self.lin(x)
            return torch.cdist(h[None], h[None])[0]

    model = Distances().half()
    with pytest.raises(doctor.ModelInputError) as info:
        doctor.diagnose(model, torch.randn(8, 8).half())
    assert str(info.value).startswith(
        "an operation of the model has no half-precision kernel on this device: diagnose it in "
        "float32 (model.float(), --dtype float32); the model rejected input of shape (8, 8): "
        "NotImplementedError: \"cdist\" not implemented for 'Half'"
    )


def _quantized(static: bool) -> nn.Module:
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in torch 2.13
        warnings.simplefilter("ignore")
        if static:
            q = torch.ao.nn.quantized
            return nn.Sequential(q.Quantize(0.1, 0, torch.quint8), q.Linear(8, 2), q.DeQuantize())
        return torch.ao.quantization.quantize_dynamic(mlp(), {nn.Linear}, dtype=torch.qint8)


@pytest.mark.parametrize(
    ("static", "kind"),
    [(False, "torch.ao.nn.quantized.dynamic.Linear"), (True, "torch.ao.nn.quantized.Quantize")],
)
def test_a_quantized_model_is_refused_before_it_runs(static: bool, kind: str) -> None:
    model = _quantized(static)
    calls = counted(model)
    with pytest.raises(doctor.CannotDiagnose) as info:
        doctor.diagnose(model, torch.randn(8, 8))
    assert str(info.value) == (
        f"the model is quantized: model[0] is {kind}, whose integer weights take no gradient; "
        "diagnose the float model, before quantization (torch.ao.quantization.quantize_dynamic "
        "or convert)"
    )
    assert calls == []


class Tokens(nn.Module):
    """Token ids -> embedding + learned positions -> head."""

    def __init__(self, vocab: int = 50, positions: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, 16)
        self.pos = nn.Embedding(positions, 16)
        self.head = nn.Linear(16, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        where = torch.arange(ids.shape[-1])  # (T,): computed, not the input's
        return self.head(self.embed(ids) + self.pos(where))


@pytest.mark.parametrize(("bad", "shown"), [(57, 57), (-3, -3)])
def test_token_ids_out_of_range_name_the_embedding_its_size_and_the_flag(
    bad: int, shown: int
) -> None:
    model = Tokens()
    ids = torch.randint(50, (4, 8), generator=torch.Generator().manual_seed(0))
    ids[2, 3] = bad
    head = counted(model.head)
    for given in (ids, {"ids": ids}, ids[:, :6]):  # a tensor, a keyword input, a view of one
        with pytest.raises(doctor.ModelInputError) as info:
            doctor.diagnose(model, given)
        assert str(info.value) == (
            f"model.embed (Embedding with 50 rows) was given id {shown}, from the input; token "
            "ids must be in [0, 50): draw them below 50 (--tokens V with V <= 50)"
        )
    assert head == []  # refused before the embedding read them: nothing after it ran


def test_ids_the_model_computes_out_of_range_ask_for_a_shorter_input() -> None:
    with pytest.raises(doctor.ModelInputError) as info:
        doctor.diagnose(Tokens(positions=16), torch.randint(50, (4, 20)))
    assert str(info.value) == (
        "model.pos (Embedding with 16 rows) was given id 19, computed by the model from the "
        "input (a position beyond its 16? use a shorter sequence, --input-shape)"
    )
    assert doctor.diagnose(Tokens(positions=16), torch.randint(50, (4, 16))).layers


class Positions(nn.Embedding):
    """Reads only its argument's shape, as Hugging Face's BART and FSMT position embeddings."""

    def forward(self, ids: Tensor) -> Tensor:
        return super().forward(torch.arange(ids.shape[-1]))


class Scaled(nn.Embedding):
    """Looks its argument up in its own forward, as Gemma's scaled word embedding."""

    def forward(self, ids: Tensor) -> Tensor:
        return super().forward(ids) * 4.0


def test_an_embedding_with_its_own_forward_is_not_judged_by_its_argument() -> None:
    """A subclass may read its argument otherwise (no false refusal); a lookup of its own that
    fails is hinted at from torch's error."""
    model = Tokens()
    model.pos = Positions(16, 16)
    ids = torch.randint(50, (4, 8), generator=torch.Generator().manual_seed(0))
    assert int(ids.max()) >= 16 and doctor.diagnose(model, ids).layers  # ids reach 16 rows
    model.embed = Scaled(50, 16)
    ids[1, 1] = 57
    with pytest.raises(doctor.ModelInputError) as info:
        doctor.diagnose(model, ids)
    assert str(info.value) == (
        "token ids out of an embedding's range? the input's reach 57 (--tokens V); the model "
        "rejected input of shape (4, 8): IndexError: index out of range in self"
    )


# -- the same through normlab doctor --------------------------------------------------------------

MODELS = """
import warnings

import torch
from torch import nn


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))


def meta():
    with torch.device("meta"):
        return _mlp()


def half():
    return _mlp().half()


def quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(_mlp(), {nn.Linear}, dtype=torch.qint8)


class _Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50)

    def forward(self, ids):
        return self.head(self.embed(ids))


def tokens():
    return _Tokens()
"""

CLI = [
    (
        ["models.py:meta", "--input-shape", "8,16"],
        "normlab: error: model 'models.py:meta': the model is on the meta device: "
        "model[0].weight has a shape but no values; materialize it first: "
        "model.to_empty(device='cpu'), then initialize the weights",
    ),
    (
        ["models.py:half", "--input-shape", "8,16"],
        "normlab: error: model 'models.py:half': the model's parameters are float16 and the "
        "input float32: give a float16 input (--dtype float16); the model rejected input of "
        "shape (8, 16): RuntimeError: ",
    ),
    (
        ["models.py:quantized", "--input-shape", "8,16"],
        "normlab: error: model 'models.py:quantized': the model is quantized: model[0] is "
        "torch.ao.nn.quantized.dynamic.Linear, whose integer weights take no gradient; "
        "diagnose the float model, before quantization",
    ),
    (
        ["models.py:tokens", "--input-shape", "8,16", "--tokens", "60"],
        "normlab: error: model 'models.py:tokens': model.embed (Embedding with 50 rows) was "
        "given id 5",  # the largest of 128 draws from [0, 60): 50..59
    ),
]


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory: pytest.TempPathFactory) -> list[list[Any]]:
    """[status, stdout, stderr] of each command, through the entry point's own function in
    this process (a process apiece would cost a torch import each; that the status reaches
    the shell is tests/test_cli_doctor.py's)."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "models.py").write_text(MODELS)
    argvs = [["doctor", *argv] for argv, _ in CLI]
    argvs += [  # the flags the errors name, taken
        ["doctor", "models.py:half", "--input-shape", "8,16", "--dtype", "float16", "--json"],
        ["doctor", "models.py:tokens", "--input-shape", "8,16", "--tokens", "50", "--json"],
    ]
    results = []
    for argv in argvs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.chdir(d), redirect_stdout(out), redirect_stderr(err):
            status = cli.main(argv)
        results.append([status, out.getvalue(), err.getvalue()])
    return results


@pytest.mark.parametrize("case", range(len(CLI)), ids=[a[0] for a, _ in CLI])
def test_the_cli_exits_2_with_one_line_naming_the_cause(
    cli_results: list[list[Any]], case: int
) -> None:
    status, stdout, stderr = cli_results[case]
    assert status == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(CLI[case][1])
    if "tokens" in CLI[case][0][0]:
        assert lines[0].endswith(
            ", from the input; token ids must be in [0, 50): draw them below 50 "
            "(--tokens V with V <= 50)"
        )


def test_the_flags_the_errors_name_make_the_model_run(cli_results: list[list[Any]]) -> None:
    for status, stdout, _ in cli_results[len(CLI) :]:
        assert status == 0
        assert json.loads(stdout)["layers"]
