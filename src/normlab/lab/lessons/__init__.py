"""The lab's lessons, in reading order.

Each lesson is a Jinja template in this folder (``<slug>.html``) that extends ``lesson.html``.
Its numbers come from live runs through the template helper ``result(...)``; see
:mod:`normlab.lab.pages` for the helpers every lesson template can call.

>>> [lesson.slug for lesson in LESSONS][:5]  # the seed lessons, then the newer ones
['drift', 'batch-norm', 'initialization', 'bn-from-scratch', 'bn-training']
>>> LESSONS[-1].slug
'doctor'
>>> find("batch-norm").number, find("nope") is None
(2, True)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    """One lesson page: ``/lessons/<slug>``."""

    slug: str
    title: str
    summary: str
    experiments: tuple[str, ...]  # the widgets it shows, in page order
    number: int = 0

    @property
    def template(self) -> str:
        return f"{self.slug}.html"

    @property
    def url(self) -> str:
        return f"/lessons/{self.slug}"


_ORDER = (
    Lesson(
        "drift",
        "Why activations drift",
        "Measure the mean and spread of activations, and watch the spread shrink layer by layer "
        "through a plain deep stack.",
        ("linear-scale", "drift"),
    ),
    Lesson(
        "batch-norm",
        "Batch normalization",
        "Rescale every feature over the batch, keep running estimates for later, and see the "
        "deep stack hold its scale.",
        ("bn-columns", "bn-running-stats", "bn-stack"),
    ),
    Lesson(
        "initialization",
        "Initialization",
        "Why constant weights never learn, how large random weights should be, and how Xavier "
        "and He follow from one variance argument.",
        ("two-moons", "error-surface", "symmetry", "variance", "init-compare", "init-train"),
    ),
    Lesson(
        "bn-from-scratch",
        "BatchNorm from scratch, and training fast",
        "Write the normalization yourself, check it against PyTorch to float precision, and "
        "train a deep net at a learning rate that breaks it without BatchNorm.",
        ("bn-from-scratch", "bn-lr", "bn-lr-sweep"),
    ),
    Lesson(
        "bn-training",
        "What BatchNorm changes in training",
        "Internal covariate shift and the smoother loss surface that replaced it as the "
        "explanation, the noise of batch statistics as a regularizer, and a network that stops "
        "depending on its initializer.",
        ("bn-regularization", "bn-lr"),
    ),
    Lesson(
        "edge-of-chaos",
        "The edge of chaos",
        "The variance argument run layer after layer, for two inputs at once: a length map, a "
        "correlation map with an ordered and a chaotic phase, and the critical line between "
        "them, measured on real stacks, where deep tanh networks still train.",
        ("edge-of-chaos",),
    ),
    Lesson(
        "dynamical-isometry",
        "Dynamical isometry",
        "Beyond the variance argument: the spectrum of the Jacobian of a deep stack, why "
        "orthogonal weights keep all of it near 1 for tanh near the origin, and why ReLU cannot.",
        ("jacobian-spectrum",),
    ),
    Lesson(
        "residual-normalization",
        "Normalization in residual networks and transformers",
        "Why BatchNorm needs skips, where transformers put LayerNorm (post, pre, peri), what can "
        "replace it (scaled branches as in GPT-2, ReZero, DyT), and how attention merges tokens.",
        ("bn-gradient-explosion", "residual-stream"),
    ),
    Lesson(
        "width-depth",
        "Width and depth",
        "The coordinate check: why a wider net's layers move more under the same learning rate, "
        "how muP's per-layer rates hold them, and what it leaves to the depth.",
        ("coord-check",),
    ),
    Lesson(
        "doctor",
        "The model doctor",
        "Point the same measurements at any model: find the layer where the scale vanishes, "
        "explodes or dies, and the initializer or normalization that cures it.",
        ("doctor",),
    ),
)

LESSONS: tuple[Lesson, ...] = tuple(
    Lesson(le.slug, le.title, le.summary, le.experiments, number=i + 1)
    for i, le in enumerate(_ORDER)
)
"""Every lesson, numbered from 1 in reading order."""


def find(slug: str) -> Lesson | None:
    """The lesson called ``slug``, or ``None``."""
    return next((lesson for lesson in LESSONS if lesson.slug == slug), None)


def neighbours(lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after ``lesson`` (``None`` at either end)."""
    i = lesson.number - 1
    before = LESSONS[i - 1] if i > 0 else None
    after = LESSONS[i + 1] if i + 1 < len(LESSONS) else None
    return before, after
