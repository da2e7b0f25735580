r"""Diagnose a model's signal propagation: which layer lets the scale vanish or explode, which
units are dead, saturated or identical, and what to change.

:func:`diagnose` runs a few forward and backward passes under :class:`normlab.probe.ActivationProbe`
and :class:`normlab.probe.GradientProbe` and labels every probed (leaf) module from a fixed
vocabulary. Let :math:`s_0` be the standard deviation of the model's input (for token ids, or
another input with no scale of its own, that of the first layer's output, the embedding; 1 when
that is 0) and :math:`s_l` that of layer :math:`l`'s output, both over every element of the
batch; a *unit* is a channel (dim 1) after convolutions, batch norms, group norms and poolings
with 3+ dimensions, the last dimension otherwise, and an elementwise layer (activation,
dropout) takes the unit dimension of the layer before it. Layers are known by what they do: a
weight layer has parameters of its own with 2+ dimensions (Hugging Face's ``Conv1D`` too), and
norms and activations outside torch are known by their family names (``*RMSNorm``,
``*LayerNorm``, GELU, SiLU).

=============  ==================================================================================
label          when (thresholds are module constants)
=============  ==================================================================================
``non-finite`` an activation or a gradient of the layer is ``inf`` or ``nan`` (a diverged run,
               an overflow in float16): the layer's other numbers cannot be judged, so it gets
               this label alone
``vanishing``  :math:`s_l < 10^{-2}\, s_0` (:data:`VANISHING`), or a weight layer whose
               gradient ratio :math:`\rho_l < 10^{-3}` (:data:`GRAD_VANISHING`, below), or
               one a sustained depth trend puts 10x below the output end (:class:`Trend`)
``exploding``  :math:`s_l > 10^{2}\, s_0` (:data:`EXPLODING`), or
               :math:`\rho_l > 10^{3}` (:data:`GRAD_EXPLODING`), or 10x above by a trend
``dead``       at least 60% of the units (:data:`DEAD_FRAC`) are exactly 0 for every element of
               the batch (a ReLU whose pre-activation is negative on every input); depth alone
               leaves up to ~45% of a 20-layer He-initialized ReLU stack's units off on a batch
               of 64, as its inputs grow alike
``saturated``  tanh-like outputs (Tanh, Hardtanh, Softsign) with :math:`|y| \ge 0.99`, or
               sigmoid-like outputs with :math:`|y - 0.5| \ge 0.49`, for at least a quarter of
               the elements (:data:`SATURATED_FRAC`)
``symmetric``  2+ units and every unit equal to unit 0 on every element of the batch's first
               32 items: :math:`\max |y_u - y_0| \le 10^{-5} \max |y|`
               (:data:`SYMMETRIC_SPREAD`; weights that make units equal do so on any input)
``ok``         none of the above
=============  ==================================================================================

Fractions are averaged over the steps; the symmetry test must hold at every step. Dead and
symmetric are properties of the batch: use a batch of at least a few dozen examples. Mean, std
(two-pass, float64: a collapsed sigmoid's 0.5 +- 1e-9 keeps its std) and the tanh saturation
come from the probe over every element (:func:`probe_settings`); the per-unit numbers
(dead units, unit spread, sigmoid saturation) are typed statistic functions passed to the probe
through ``stats=``, each computed once per layer and step for the channel dim and, on 3+
dimensional outputs, for the last dim, and picked afterwards by the layer's kind. The labels
read the forward pass, and the backward pass through the gradient ratio of the weight layers
(those with a weight of 2+ dimensions: Linear, convolutions, LSTM, attention, embeddings):

.. math::

    \rho_l = \frac{\lVert \partial L / \partial W_l \rVert \,/\, \lVert W_l \rVert}
                 {\lVert \partial L / \partial W_L \rVert \,/\, \lVert W_L \rVert}

over all of the layer's weights of 2+ dimensions, with :math:`W_L` those of the last weight layer
(the one nearest the output) and the ratios averaged over the steps. With one learning rate
for the whole model, :math:`\rho_l` is how fast layer :math:`l`'s weights move, relative to their
size, against the last layer's: below :math:`10^{-3}` they barely learn (the gradient vanished
on its way back), above :math:`10^3` they take steps a thousand times larger (it exploded). The
bounds are wider than the forward ones because the last layer, next to the loss, differs from
the rest even in a sound model: over every zoo model, norm and init (three seeds and batch
sizes each), the healthy ones spread :math:`\rho` over 0.02..72. The forward scale alone misses
a vanishing gradient: the zoo's ``vanishing-sigmoid`` (20 sigmoid layers, PyTorch's default
init) keeps an output std near 0.07 in every layer, while its first layer's :math:`\rho` is
about :math:`10^{-17}`. A scale that vanishes evenly in both directions (the zoo's
``vanishing-tanh``) leaves :math:`\rho` near 1 (each layer's weight gradient is its input, which
shrinks going forward, times the gradient at its output, which shrinks going back) and is found
by :math:`s_l`. The gradient standard deviation of each layer's output (the loss is a fixed
random linear readout of the model's output, so the gradient that enters the model has the same
scale whatever its output scale) is reported beside them; it is per element, so it also shrinks
where a pooling or a mean spreads the gradient over more elements, and no label reads it.

A residual branch is judged against the stream it adds into: where a layer reads a sum of
layers' outputs (``x + f(x)``), the producer that descends from all the others is the branch's
end, and its ``branch`` number, its std over the sum's, takes the place of :math:`s_l / s_0` in
the scale labels (a branch that adds nothing to its stream is vanishing, whatever the input's
scale). Residual branches scaled on purpose are not judged by scale: where a small parameter
(:data:`BRANCH_SCALE`; layer scale, ReZero, SkipInit) multiplies a layer's output between
layers, the layers whose every path to the output crosses it, and those right after it, keep
their numbers but get no scale label, and the reference layer of :math:`\rho` is the last one not
so scaled (ConvNeXt: its classifier). Their small start is the design (Touvron et al., 2021, CaiT;
Bachlechner et al., 2021, ReZero), the notes say so.

A problem spread over depth is found by its trend even when no single layer crosses a bound:
:math:`\log \rho` fitted linearly over the model's repeated blocks (:class:`Trend`). A steady
growth of 100x or more over 6+ blocks (R^2 >= 0.9) is labelled: a deep BatchNorm + ReLU stack's
squared ratio grows by :math:`\pi/(\pi-1)` per layer toward the input (Yang et al., 2019),
and 30 such layers do not train. Post-LN and pre-LN encoders part here too: pre-LN's ratio grows
mildly toward the input, post-LN's does not.

Suggestions name the initializer that suits the activation that consumes each weight layer's
output, found in the autograd graph of one forward pass (through residual adds and other tensor
operations, and past normalization, dropout, pooling and identity layers): He for the ReLU
family, Xavier with the activation's gain for tanh, sigmoid or nothing (see
:func:`normlab.init.calculate_gain`), and where a normalization layer would help. Activations
applied as functions (``F.relu`` inside ``forward``) are invisible to hooks: the layer before them
then counts as followed by nothing (gain 1). :func:`fix` re-initializes the ``Linear`` and
``Conv1d/2d/3d`` layers by one of :data:`FIX_METHODS` (recurrent and attention input weights are
left alone), zeroing their biases.
"""

from __future__ import annotations

from normlab.doctor.constants import (
    DEAD_FRAC,
    EXPLODING,
    FIX_METHODS,
    GRAD_EXPLODING,
    GRAD_VANISHING,
    LABELS,
    SATURATED_FRAC,
    SEVERITY,
    SIGMOID_SATURATION,
    SYMMETRIC_SPREAD,
    TANH_SATURATION,
    VANISHING,
)
from normlab.doctor.cure import fix
from normlab.doctor.errors import CannotDiagnose, ModelInputError, ModelOutputError
from normlab.doctor.graph import BRANCH_SCALE, Edges
from normlab.doctor.measure import probe_settings
from normlab.doctor.results import (
    TREND_BLOCKS,
    TREND_R2,
    TREND_TOTAL,
    Diagnosis,
    FixReport,
    LayerDiagnosis,
    Trend,
    module_path,
)
from normlab.doctor.running import OUTPUT_FIELDS, Input
from normlab.doctor.training import TRIAL_LR, TRIAL_STEPS, Trial, trial
from normlab.doctor.visit import Examination, diagnose, examine

__all__ = [
    "BRANCH_SCALE",
    "DEAD_FRAC",
    "EXPLODING",
    "FIX_METHODS",
    "GRAD_EXPLODING",
    "GRAD_VANISHING",
    "LABELS",
    "OUTPUT_FIELDS",
    "SATURATED_FRAC",
    "SEVERITY",
    "SIGMOID_SATURATION",
    "SYMMETRIC_SPREAD",
    "TANH_SATURATION",
    "TREND_BLOCKS",
    "TREND_R2",
    "TREND_TOTAL",
    "TRIAL_LR",
    "TRIAL_STEPS",
    "VANISHING",
    "CannotDiagnose",
    "Diagnosis",
    "Edges",
    "Examination",
    "FixReport",
    "Input",
    "LayerDiagnosis",
    "ModelInputError",
    "ModelOutputError",
    "Trend",
    "Trial",
    "diagnose",
    "examine",
    "fix",
    "module_path",
    "probe_settings",
    "trial",
]
