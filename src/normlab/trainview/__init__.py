r"""Watch it train: one live training run, stepped by hand, with everything a view draws.

A :class:`Session` holds one run of a small classifier on a 2-D toy dataset: the points, a
``torch.nn.Sequential`` of ``depth`` blocks ``Linear -> [Norm] -> activation`` (the norm before
the activation, as the seeds place BatchNorm), and its optimizer, all built from ``seed`` in a
fixed order. :meth:`Session.step` takes exactly one optimizer step with the visible loop
(``zero_grad``, forward, loss, backward, step) and records the step's training loss and the
test loss after it; :meth:`Session.frame` is what a view shows at that moment: the decision
boundary over the input plane, the accuracies, every layer's statistics with the doctor's
labels and histograms of each hidden layer's activations and gradients.

Every class is 0 or 1 (the blobs are two), so the loss is binary cross-entropy on one logit.
The statistics come from the last step's own forward and backward pass, under
:func:`normlab.watch` (the doctor's probes) and this module's histogram taps: hooks read the
tensors, and nothing computes a second pass that could change a loss or draw a random number.
Before the first step, the frame's statistics come from one look at the initialization (the
same pass on the whole training set, its side effects undone: BatchNorm's running statistics
are put back, the gradients dropped).

What a view draws of the frames is described in Python, as every experiment's figures are:
:mod:`normlab.trainview.figures` keeps a bounded :class:`~normlab.trainview.figures.History` of
them and makes the :mod:`normlab.figures` descriptions that the lab's renderer and
:mod:`normlab.plots` (``normlab train --plot``) draw.

The view is the registry's ``training`` experiment run one step at a time: its settings are
that experiment's :class:`Setup` (the command line ``normlab train``, the lab's HTTP validation
and its widgets are generated from :data:`PARAMETERS`), and the computation is its plain
functions (``make_data`` ... ``train_step``, ``evaluate``: torch, numpy and scikit-learn), so
:func:`script`, the registry's renderer, prints the losses the session records, step for step.
"""

from normlab.experiments.training import (
    ACTIVATIONS,
    DATASETS,
    INITS,
    OPTIMIZERS,
    Setup,
    batches,
    build,
    evaluate,
    init_weights,
    make_data,
    make_model,
    make_optimizer,
)
from normlab.models import NORMS
from normlab.train import train_step
from normlab.trainview.runs import Run, run, script
from normlab.trainview.session import (
    GRID,
    HIST_BINS,
    HIST_RANGE,
    KEEP,
    PAD,
    Session,
    hist_edges,
    log_histogram,
)
from normlab.trainview.setup import GROUPS, PARAMETERS, STEPS, make_setup

__all__ = [
    "ACTIVATIONS",
    "DATASETS",
    "GRID",
    "GROUPS",
    "HIST_BINS",
    "HIST_RANGE",
    "INITS",
    "KEEP",
    "NORMS",
    "OPTIMIZERS",
    "PAD",
    "PARAMETERS",
    "STEPS",
    "Run",
    "Session",
    "Setup",
    "batches",
    "build",
    "evaluate",
    "hist_edges",
    "init_weights",
    "log_histogram",
    "make_data",
    "make_model",
    "make_optimizer",
    "make_setup",
    "run",
    "script",
    "train_step",
]
