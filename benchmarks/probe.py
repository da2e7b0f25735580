"""ActivationProbe on every layer: its cost next to the plain forward and the notebook way.

Two models, each timed in one process with the variants interleaved (each repeat runs all of
them, in rotating order), reported as median times and ratios to the plain forward. A ratio is
paired: the median over the rounds of the two variants' times in the same round, so that a
change in the machine's speed between rounds (other work, a slower core) cancels out.

- a 50-layer, 256-wide MLP (Linear + ReLU per layer: 100 probed modules), batch 256;
- ``normlab.zoo``'s ResNet-style CNN (BatchNorm2d after every conv), batch 256 of 3x16x16.

Variants, all under ``torch.no_grad()`` (an inference forward, where the hooks weigh most),
each on its own copy of the model so that no hook fires in another's timing:

- plain: the model alone;
- probe: ``ActivationProbe`` on every layer with its default sample (1024 elements per
  output), ``step()`` after each forward: its one host transfer and the reduction of all
  samples are inside the timing;
- probe, saturation: the same with ``saturation=0.99`` (two kernels more per step);
- probe, every element: the same with ``sample_size=None`` (exact over whole outputs);
- notebook: per-layer forward hooks calling ``.mean().item()``, ``.std().item()`` and
  ``histc(40, -4, 4)``, the usual way of watching activations (whole outputs);
- var_mean: per-layer hooks with ``torch.var_mean`` and ``aminmax`` (``.item()`` each);
- copy only: per-layer hooks that copy the probe's sample (``torch.take`` with its indices)
  into a preallocated buffer and do nothing else: the floor of any sampling probe. With two
  threads the output was written by two cores, and reading a sample spread over all of it
  moves cache lines between them; the floor shows what is left for the probe's own work.

Then, for training, on real architectures built from ``transformers`` configs (random init):
GPT-2 (12 blocks x 128, a batch of 16 x 64 tokens) and a ResNet (basic blocks 2-2-2-2, 16 images
of 3 x 64 x 64), each step a forward and a backward pass of ``logits.square().mean()``, on the
CPU or on ``--device`` (a GPU: the clock waits for the device at both ends of a timing):

- plain: the step alone;
- probes: ``ActivationProbe`` and ``GradientProbe`` at their defaults, ``step()`` each (target:
  within 1.15x of plain on a transformer, 1.25x on a convolutional model);
- doctor: the probes as :func:`normlab.doctor.probe_settings` sets them (every element, the typed
  per-unit statistics, saturation; target: within 1.6x);
- exact-gradient floor: per module, a forward hook that hooks its output's gradient (each tensor
  once a step, as the probe does) and a gradient hook that reads it once (``grad.sum()``) and
  keeps nothing: the least that any exact per-layer gradient statistic costs through hooks,
  before the activations are looked at.

``--against REV`` times today's probe beside the one at git revision ``REV`` (its
``src/normlab/probe.py``, read with ``git show`` and run as a fresh module: no copied file): each
probe variant above runs twice, interleaved in the same rounds, and the paired ratio new / REV is
printed for each, with whether both gave the same numbers (``result().to_dict()`` equal).

Absolute times on a shared machine move from run to run; the ratios within one run are the
result. The load average is printed so that a noisy run can be told apart; ``--cpu-time``
(process CPU time) with ``--threads 1`` is steadier when other work shares the cores.

Usage::

    python benchmarks/probe.py                          # 30 repeats, torch's threads
    python benchmarks/probe.py --threads 1 --cpu-time   # steadier on a busy machine
    python benchmarks/probe.py --quick                  # 3 repeats, batch 64: a smoke test
    python benchmarks/probe.py --no-inference --device cuda   # training, on a GPU
    python benchmarks/probe.py --threads 1 --against main     # this probe next to main's
"""

import argparse
import copy
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import normlab.probe
from normlab import zoo
from normlab.probe import (
    SAMPLE_SIZE,
    first_float_tensor,
    sample_indices,
    select_modules,
)

Forward = Callable[[], None]
Clock = Callable[[], float]
PROBE, EXACT, NOTEBOOK = "ActivationProbe + step()", "  the same, every element", "notebook"
SATURATED, FLOOR = "  the same, + saturation", "copy only (the floor)"
TARGET = 1.3  # the most probe / plain may be
AGAINST = 1.1  # the most this probe / a baseline's may be (--against)
TRAIN_TARGET = {"transformer": 1.15, "conv": 1.25}  # forward + backward: probes at defaults
DOCTOR_TARGET = 1.6  # forward + backward: the doctor's settings
DOCTOR, DEFAULTS = "the doctor's settings", "probes at their defaults"


def mlp(depth: int = 50, width: int = 256) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def plain(model: nn.Module, x: torch.Tensor) -> Forward:
    def run() -> None:
        model(x)

    return run


def load_probe(rev: str) -> types.ModuleType:
    """``src/normlab/probe.py`` as it is at git revision ``rev``, executed into a fresh module
    object (registered in ``sys.modules``, where dataclasses look their module up)."""
    root = Path(__file__).resolve().parent.parent
    show = ["git", "show", f"{rev}:src/normlab/probe.py"]
    source = subprocess.run(show, cwd=root, capture_output=True, text=True, check=True).stdout
    name = "normlab_probe_at_" + re.sub(r"\W", "_", rev)
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, f"{rev}:src/normlab/probe.py", "exec"), module.__dict__)
    return module


def with_probe(
    model: nn.Module,
    x: torch.Tensor,
    sample_size: int | None,
    saturation: float | None = None,
    probe_module: types.ModuleType = normlab.probe,
    entered: list[Any] | None = None,
) -> Forward:
    """The probe (of ``probe_module``) stays entered for the whole benchmark, as around a
    training loop; it is appended to ``entered``."""
    settings = {"sample_size": sample_size, "saturation": saturation}
    probe = probe_module.ActivationProbe(model, **settings).__enter__()
    if entered is not None:
        entered.append(probe)

    def run() -> None:
        model(x)
        probe.step()

    return run


def with_hooks(model: nn.Module, x: torch.Tensor, hook: Callable[..., None]) -> Forward:
    for _, m in select_modules(model):
        m.register_forward_hook(hook)
    return plain(model, x)


def notebook_hook(kept: list[object]) -> Callable[..., None]:
    def hook(module: nn.Module, args: object, out: torch.Tensor) -> None:
        kept.append((out.mean().item(), out.std().item(), out.histc(40, -4, 4)))

    return hook


def var_mean_hook(kept: list[object]) -> Callable[..., None]:
    def hook(module: nn.Module, args: object, out: torch.Tensor) -> None:
        var, mean = torch.var_mean(out)
        low, high = torch.aminmax(out)
        kept.append((mean.item(), var.item(), low.item(), high.item()))

    return hook


def copy_hook(calls: int) -> Callable[..., None]:
    """Copy each output's sample into row k of a buffer; k wraps after ``calls`` calls."""
    buffer, count, indices = torch.empty(calls, SAMPLE_SIZE), [0], {}

    def hook(module: nn.Module, args: object, out: torch.Tensor) -> None:
        n = out.numel()
        if n not in indices:
            indices[n] = sample_indices(n)
        index = indices[n]
        torch.take(out, index, out=buffer[count[0] % calls, : len(index)])
        count[0] += 1

    return hook


def at(label: str, rev: str) -> str:
    """The name of ``label``'s variant run with the probe at ``rev``."""
    return f"{label.strip()} @ {rev}"


def against(
    times: dict[str, list[float]], entered: dict[str, list[Any]], rev: str
) -> list[tuple[str, float, bool]]:
    """Print and return, for each probe variant, the paired ratio new / ``rev`` and whether its
    probes' results equal the baseline's (``entered``: each variant's probes, by name)."""
    out = []
    for label in [n for n in entered if not n.endswith(f" @ {rev}")]:
        ratio = paired(times, label, at(label, rev))
        same = [p.result().to_dict() for p in entered[label]] == [
            p.result().to_dict() for p in entered[at(label, rev)]
        ]
        print(f"  new / {rev}: {label.strip():32s} {ratio:6.3f}x   same numbers: {same}")
        out.append((label.strip(), ratio, same))
    return out


Baseline = tuple[str, types.ModuleType] | None  # a git revision and its probe module
PROBE_SETTINGS = {PROBE: (SAMPLE_SIZE, None), SATURATED: (SAMPLE_SIZE, 0.99), EXACT: (None, None)}


def bench(
    name: str,
    model: nn.Module,
    x: torch.Tensor,
    repeats: int,
    clock: Clock,
    baseline: Baseline = None,
) -> tuple[float, list[tuple[str, float, bool]]]:
    """Print the variants' median times and ratios; return probe / plain and the comparisons
    with ``baseline`` (see :func:`against`)."""
    model.eval()
    kept: list[object] = []
    variants: dict[str, Forward] = {"plain forward": plain(model, x)}
    entered: dict[str, list[Any]] = {}
    for label, (size, saturation) in PROBE_SETTINGS.items():
        entered[label] = []
        variants[label] = with_probe(
            copy.deepcopy(model), x, size, saturation, entered=entered[label]
        )
        if baseline is not None:
            rev, module = baseline
            old: list[Any] = []
            entered[at(label, rev)] = old
            variants[at(label, rev)] = with_probe(
                copy.deepcopy(model), x, size, saturation, module, old
            )
    variants |= {
        NOTEBOOK: with_hooks(copy.deepcopy(model), x, notebook_hook(kept)),
        "var_mean + aminmax hooks": with_hooks(copy.deepcopy(model), x, var_mean_hook(kept)),
        FLOOR: with_hooks(copy.deepcopy(model), x, copy_hook(len(select_modules(model)))),
    }
    times = interleave(variants, repeats, clock, after=kept.clear)
    print(f"\n{name}: {len(select_modules(model))} probed modules, input {tuple(x.shape)}")
    show(times, "plain forward")
    probe = paired(times, PROBE, "plain forward")
    verdict = "within" if probe <= TARGET else "OVER"
    print(
        f"  probe / plain {probe:.2f}x: {verdict} the {TARGET}x target;  "
        f"notebook / probe {paired(times, NOTEBOOK, PROBE):.2f}x (target >= 2x);  "
        f"notebook / probe every element {paired(times, NOTEBOOK, EXACT):.2f}x;  "
        f"probe / copy only {paired(times, PROBE, FLOOR):.2f}x"
    )
    return probe, against(times, entered, baseline[0]) if baseline else []


def real_models(quick: bool) -> list[tuple[str, str, nn.Module, torch.Tensor]]:
    """GPT-2 and a ResNet from transformers configs, each with its kind and one input batch."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=12, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
    )
    shape: dict[str, Any] = {"embedding_size": 32, "hidden_sizes": [32, 64, 128, 256]}
    blocks: dict[str, Any] = {"depths": [2, 2, 2, 2], "layer_type": "basic", "num_labels": 10}
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(**shape, **blocks))
    n = 4 if quick else 16
    ids = torch.randint(1000, (n, 64))  # (N, T) token ids
    images = torch.randn(n, 3, 64, 64)  # (N, C, H, W)
    return [
        ("GPT-2 12 x 128", "transformer", gpt2, ids),
        ("ResNet 2-2-2-2", "conv", resnet, images),
    ]


def train_step(model: nn.Module, x: torch.Tensor, after: Callable[[], None]) -> Forward:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        model(x).logits.square().mean().backward()  # (N, ..., classes) -> a number
        after()

    return run


def with_probes(
    model: nn.Module,
    x: torch.Tensor,
    probe_module: types.ModuleType = normlab.probe,
    entered: list[Any] | None = None,
    **settings: Any,
) -> Forward:
    """Both probes (of ``probe_module``) entered for the whole run, stepped after each backward
    pass; they are appended to ``entered``."""
    ap = probe_module.ActivationProbe(model, **settings).__enter__()
    gp = probe_module.GradientProbe(model).__enter__()
    if entered is not None:
        entered += [ap, gp]

    def after() -> None:
        ap.step()
        gp.step()

    return train_step(model, x, after)


def with_gradient_floor(model: nn.Module, x: torch.Tensor) -> Forward:
    """Each distinct output's gradient hooked once a step and read once, nothing kept."""
    hooked: dict[int, torch.Tensor] = {}  # this step's hooked outputs, held: ids stay theirs
    sums: list[torch.Tensor] = []

    def hook(module: nn.Module, args: object, out: object) -> None:
        y = first_float_tensor(out)
        if y is not None and y.requires_grad and id(y) not in hooked:
            hooked[id(y)] = y
            y.register_hook(lambda g: sums.append(g.sum()))

    def after() -> None:
        hooked.clear()
        sums.clear()

    for _, m in select_modules(model):
        m.register_forward_hook(hook)
    return train_step(model, x, after)


def bench_training(
    repeats: int, clock: Clock, device: str, baseline: Baseline = None
) -> tuple[list[tuple[str, str, float, float, float]], list[tuple[str, float, bool]]]:
    """Print the training variants' medians; return (model, kind, probes / plain, doctor /
    plain, floor / plain) per model, and the comparisons with ``baseline`` (:func:`against`).
    Each call starts from the same random state (dropout), so that probes can be compared."""
    from normlab import doctor

    out, compared = [], []
    for name, kind, model, x in real_models(repeats <= 3):
        model, x = model.to(device), x.to(device)
        variants = {"plain forward + backward": train_step(model, x, lambda: None)}
        entered: dict[str, list[Any]] = {}
        for label, settings in {DEFAULTS: {}, DOCTOR: doctor.probe_settings(model)}.items():
            entered[label] = []
            variants[label] = with_probes(
                copy.deepcopy(model), x, entered=entered[label], **settings
            )
            if baseline is not None:
                rev, module = baseline
                old: list[Any] = []
                entered[at(label, rev)] = old
                variants[at(label, rev)] = with_probes(
                    copy.deepcopy(model), x, module, old, **settings
                )
        variants["exact-gradient floor"] = with_gradient_floor(copy.deepcopy(model), x)
        times = interleave(variants, repeats, clock, grad=True, after=lambda: torch.manual_seed(0))
        probed = len(select_modules(model))
        print(f"\ntraining {name}: {probed} probed modules, input {tuple(x.shape)}")
        base = "plain forward + backward"
        show(times, base)
        probes, full = (paired(times, n, base) for n in (DEFAULTS, DOCTOR))
        out.append((name, kind, probes, full, paired(times, "exact-gradient floor", base)))
        if baseline is not None:
            compared += [
                (f"{name}: {n}", r, same) for n, r, same in against(times, entered, baseline[0])
            ]
    return out, compared


def paired(times: dict[str, list[float]], name: str, base: str) -> float:
    """The median over rounds of ``name``'s time over ``base``'s in the same round."""
    return statistics.median(t / b for t, b in zip(times[name], times[base], strict=True))


def show(times: dict[str, list[float]], base: str) -> None:
    """Each variant's median time and its paired ratio to ``base``."""
    width = max(28, *map(len, times))
    for n, ts in times.items():
        ratio = paired(times, n, base)
        print(f"  {n:{width}s} median {statistics.median(ts) * 1e3:8.2f} ms   {ratio:5.2f}x plain")


def interleave(
    variants: dict[str, Forward],
    repeats: int,
    clock: Clock,
    grad: bool = False,
    after: Callable[[], object] = lambda: None,
) -> dict[str, list[float]]:
    """Each variant's time in each of ``repeats`` rounds, run in rotating order (two warm-ups:
    allocator, kernels, the probes' buffers); ``after`` runs untimed after each call, warm-ups
    too."""
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    with torch.set_grad_enabled(grad):
        for run in variants.values():
            for _ in range(2):
                run()
                after()
        for r in range(repeats):
            shift = r % len(names)
            for n in names[shift:] + names[:shift]:
                t0 = clock()
                variants[n]()
                times[n].append(clock() - t0)
                after()
    return times


def inference(
    batch: int, repeats: int, clock: Clock, baseline: Baseline = None
) -> tuple[list[float], list[tuple[str, float, bool]]]:
    """The inference benchmarks (MLP, zoo.resnet); their probe / plain ratios and the
    comparisons with ``baseline``."""
    resnet = zoo.build("resnet")
    models = [
        ("MLP 50 x (Linear 256 + ReLU)", mlp(), torch.randn(batch, 256)),
        (
            "zoo.resnet (conv + BatchNorm2d, 2 residual blocks)",
            resnet,
            torch.randn(zoo.input_shape("resnet", batch)),
        ),
    ]
    ratios, compared = [], []
    for name, model, x in models:
        ratio, versus = bench(name, model, x, repeats, clock, baseline)
        ratios.append(ratio)
        compared += [(f"{name.split(' ')[0]}: {n}", r, same) for n, r, same in versus]
    return ratios, compared


def synchronized(clock: Clock, device: torch.device) -> Clock:
    """``clock`` read once ``device`` has finished the work queued so far."""

    def read() -> float:
        torch.accelerator.synchronize(device)
        return clock()

    return read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats, batch 64")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--no-training", action="store_true", help="skip GPT-2 and the ResNet")
    parser.add_argument("--no-inference", action="store_true", help="only GPT-2 and the ResNet")
    parser.add_argument("--device", default="cpu", help="where GPT-2 and the ResNet train")
    parser.add_argument(
        "--cpu-time", action="store_true", help="process CPU time instead of wall time"
    )
    parser.add_argument(
        "--against", metavar="REV", help="also time the probe at git revision REV, interleaved"
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.device != "cpu":  # a GPU runs behind the host: wait for it around each timing
        clock = synchronized(clock, torch.device(args.device))
    repeats = args.repeats or (3 if args.quick else 30)
    batch = 64 if args.quick else 256
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    what = "process CPU time" if args.cpu_time else "wall time"
    print(
        f"ActivationProbe cost: {torch.get_num_threads()} threads, {what}, {repeats} "
        f"interleaved repeats, load average {load}"
    )
    baseline = (args.against, load_probe(args.against)) if args.against else None
    torch.manual_seed(0)
    ratios, compared = ([], []) if args.no_inference else inference(batch, repeats, clock, baseline)
    training, trained = (
        ([], []) if args.no_training else bench_training(repeats, clock, args.device, baseline)
    )
    note = " (--quick: batch 64, a smoke test; the target is for the full run)" * args.quick
    if ratios:
        verdict = "within" if max(ratios) <= TARGET else "OVER"
        shown = ", ".join(f"{r:.2f}x" for r in ratios)
        print(
            f"\nverdict: probe / plain {shown} (MLP, ResNet): {verdict} the {TARGET}x target{note}"
        )
    for name, kind, probes, full, floor in training:
        ok = probes <= TRAIN_TARGET[kind] and full <= DOCTOR_TARGET
        print(
            f"verdict, training {name} on {args.device}: probes {probes:.2f}x (target "
            f"{TRAIN_TARGET[kind]}x on a {kind} model), doctor's settings {full:.2f}x (target "
            f"{DOCTOR_TARGET}x): {'within' if ok else 'OVER'}; exact-gradient floor {floor:.2f}x"
            f"{note}"
        )
    if baseline is not None:
        print(f"\nthis probe / the probe at {args.against} (paired medians; target <= {AGAINST}x):")
        for label, ratio, same in compared + trained:
            verdict = "within" if ratio <= AGAINST else "OVER"
            print(f"  {label:60s} {ratio:6.3f}x {verdict}; same numbers: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
