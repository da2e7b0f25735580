r"""Diagnose a model's signal propagation against what its architecture predicts: which layer
lets the scale vanish or explode, which units are dead, saturated or identical, what the
residual stream does with depth, and what to change.

:func:`diagnose` runs a few forward and backward passes under :class:`normlab.probe.ActivationProbe`
and :class:`normlab.probe.GradientProbe`, traces which layer reads which (the autograd graph),
and labels every probed (leaf) module from a fixed vocabulary with :func:`judge`, the one
judgement :func:`normlab.watch` shares. Each layer is judged against its **anchor**
(:mod:`normlab.doctor.expect`): the nearest place upstream where the architecture fixes the
scale (the input, a norm's output, an embedding: token ids have no scale). Let :math:`s_a` be the
anchor's std and :math:`s_l` layer :math:`l`'s output std, over every element of the batch; a
*unit* is a channel (dim 1) after convolutions, batch norms, group norms and poolings with 3+
dimensions, the last dimension otherwise, and an elementwise layer (activation, dropout) takes
the unit dimension of the layer before it. Layers are known by what they do: a weight layer has
parameters of its own with 2+ dimensions (Hugging Face's ``Conv1D`` too), and norms and
activations outside torch are known by their family names (``*RMSNorm``, ``*LayerNorm``, GELU,
SiLU).

=============  ==================================================================================
label          when (thresholds are module constants)
=============  ==================================================================================
``non-finite`` an activation or a gradient of the layer is ``inf`` or ``nan`` (a diverged run,
               an overflow in float16): the layer's other numbers cannot be judged, so it gets
               this label alone
``vanishing``  :math:`s_l < 10^{-2}\, s_a` (:data:`VANISHING`; a norm's output against 1; a layer
               feeding only norms when :math:`s_l < \sqrt{\epsilon}` of the norm; never a
               residual branch's own scale), or a segment drifting there from its cause on
               (below), or a weight layer whose gradient ratio :math:`\rho_l < 10^{-3}`
               (:data:`GRAD_VANISHING`), or one a sustained depth trend puts 10x below
               (:class:`Trend`)
``exploding``  :math:`s_l > 10^{2}\, s_a` (:data:`EXPLODING`), or its segment drifting there, or
               :math:`\rho_l > 10^{3}` (:data:`GRAD_EXPLODING`), or 10x above by a trend, or a
               residual stream that breaks its design (:class:`Stream`: a pre-LN stream whose
               measured and predicted growth pass :data:`STREAM_GROWTH`, a post-LN stack whose
               amplification passes :data:`AMPLIFICATION`)
``dead``       at least 60% of the units (:data:`DEAD_FRAC`) are exactly 0 for every element of
               the batch (a ReLU whose pre-activation is negative on every input); depth alone
               leaves up to ~45% of a 20-layer He-initialized ReLU stack's units off on a batch
               of 64, as its inputs grow alike
``saturated``  tanh-like outputs (Tanh, Hardtanh, Softsign) with :math:`|y| \ge 0.99`, or
               sigmoid-like outputs with :math:`|y - 0.5| \ge 0.49`, for at least a quarter of
               the elements (:data:`SATURATED_FRAC`)
``symmetric``  2+ units and every unit equal to unit 0 on every element of the batch's first
               32 items: :math:`\max |y_u - y_0| \le 10^{-5} \max |y - \bar y|`
               (:data:`SYMMETRIC_SPREAD`; weights that make units equal do so on any input)
``ok``         none of the above
=============  ==================================================================================

A layer whose parameters are all 0 (a relative-position bias table, a zero-initialized last
layer) is zero by design, and not judged. A **segment** (the layers sharing an anchor) that
crosses a scale bound is labelled from its cause on: the first weight layer whose RMS gain with
its activation would compound to the bound over the segment's :math:`n` weight layers
(:math:`g \ge 100^{1/n}`), and the verdict shows that gain beside the variance argument's
prediction from the layer's weights, :math:`\sqrt{n_\text{in}\sigma_W^2\,\mathbb{E}[\phi(z)^2]}`.
The problems are ordered by cause (:func:`normlab.doctor.judge.problems`): a forward drift
before the backward symptom it produces, dead or saturated units before the vanishing scale
after them.

Fractions are averaged over the steps; the symmetry test must hold at every step. Dead and
symmetric are properties of the batch: use a batch of at least a few dozen examples. Mean, std
(two-pass, float64: a collapsed sigmoid's 0.5 +- 1e-9 keeps its std) and the tanh saturation
come from the probe over every element (:func:`probe_settings`); the per-unit numbers
(dead units, unit spread, sigmoid saturation) are typed statistic functions passed to the probe
through ``stats=``, each computed once per layer and step for the channel dim and, on 3+
dimensional outputs, for the last dim, and picked afterwards by the layer's kind. The backward
pass is read through the gradient ratio of the weight layers (those with a weight of 2+
dimensions: Linear, convolutions, LSTM, attention, embeddings):

.. math::

    \rho_l = \frac{\lVert \partial L / \partial W_l \rVert \,/\, \lVert W_l \rVert}
                 {\lVert \partial L / \partial W_r \rVert \,/\, \lVert W_r \rVert}

over all of the layer's weights of 2+ dimensions, averaged over the steps, with :math:`W_r` its
like in the last repeated block (a query projection against the last block's query projection,
:func:`normlab.doctor.expect.like_for_like`; at std-0.02 init a query's gradient is second order,
far under a classifier's) or, outside the blocks, the last weight layer. With one learning rate
for the whole model, :math:`\rho_l` is how fast layer :math:`l`'s weights move, relative to their
size: below :math:`10^{-3}` they barely learn, above :math:`10^3` they take steps a thousand
times larger. An embedding's ratio is not judged (only the batch's rows get a gradient), nor one
that mirrors a forward drift (an exploding forward pass makes the last layer's input, so its
gradient, the largest, and every earlier ratio looks small). The forward scale alone misses a
vanishing gradient: the zoo's ``vanishing-sigmoid`` keeps an output std near 0.07 in every
layer, while its first layer's :math:`\rho` is about :math:`10^{-17}`. The gradient standard
deviation of each layer's output (the loss is a fixed random linear readout of the model's
output) is reported beside them; no label reads it.

A residual branch adds into a stream that carries the signal past it: where a layer reads a
sum of layers' outputs (``x + f(x)``), the producer that descends from all the others is the
branch's end (its ``branch`` number is its std over the sum's), and the branch's layers are not
labelled vanishing by their scale (ReZero, SkipInit and std-0.02 transformers start small and
train; attention at init averages over the tokens), while their gradient ratio still says
whether they can grow. Residual branches scaled on purpose are not judged by scale: where a
small parameter (:data:`BRANCH_SCALE`; layer scale, ReZero, SkipInit) multiplies a layer's
output between layers, the layers whose every path to the output crosses it, and those right
after it, keep their numbers but get no scale label, and are no reference of :math:`\rho`
(ConvNeXt: its classifier is). Their small start is the design (Touvron et al., 2021, CaiT;
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
left alone), zeroing their biases; :func:`fixing` is the same step by step (LSUV's layers).

:func:`diagnosing` is :func:`diagnose` pass by pass: after each forward and backward pass it
yields the diagnosis of the batches so far (what :func:`diagnose` gives for them), for a view
that shows the diagnosis as it grows (the lab's ``doctor`` widget).
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
from normlab.doctor.cure import fix, fixing
from normlab.doctor.errors import CannotDiagnose, ModelInputError, ModelOutputError
from normlab.doctor.examination import Examination, examine
from normlab.doctor.expect import AMPLIFICATION, STREAM_GROWTH, Role, Stream, roles
from normlab.doctor.graph import BRANCH_SCALE, Edges
from normlab.doctor.judge import Judgement, judge
from normlab.doctor.measure import probe_settings
from normlab.doctor.remedies import (
    MAX_CHECK_PARAMS,
    REMEDIES,
    Advice,
    Remedied,
    Remedy,
    advise,
    check_cost,
    checked,
    named,
    remedy,
    why_not,
)
from normlab.doctor.results import (
    TREND_BLOCKS,
    TREND_R2,
    TREND_TOTAL,
    Diagnosis,
    FixReport,
    LayerDiagnosis,
    Trend,
)
from normlab.doctor.running import OUTPUT_FIELDS, Input, module_path
from normlab.doctor.training import CURE_GAIN, TRIAL_LR, TRIAL_SEEDS, TRIAL_STEPS, Trial, trial
from normlab.doctor.view import advice_table, diagnosis_figure, diagnosis_tables, training_figure
from normlab.doctor.visit import diagnose, diagnosing
from normlab.doctor.widths import (
    MAX_WIDTH,
    MAX_WIDTHS,
    WIDTHS_ALLOWED,
    CoordCheck,
    LayerCheck,
    SlopeFit,
    check_widths,
    coord_check,
    coord_figure,
)

__all__ = [
    "AMPLIFICATION",
    "BRANCH_SCALE",
    "CURE_GAIN",
    "DEAD_FRAC",
    "EXPLODING",
    "FIX_METHODS",
    "GRAD_EXPLODING",
    "GRAD_VANISHING",
    "LABELS",
    "MAX_CHECK_PARAMS",
    "MAX_WIDTH",
    "MAX_WIDTHS",
    "OUTPUT_FIELDS",
    "REMEDIES",
    "SATURATED_FRAC",
    "SEVERITY",
    "SIGMOID_SATURATION",
    "STREAM_GROWTH",
    "SYMMETRIC_SPREAD",
    "TANH_SATURATION",
    "TREND_BLOCKS",
    "TREND_R2",
    "TREND_TOTAL",
    "TRIAL_LR",
    "TRIAL_SEEDS",
    "TRIAL_STEPS",
    "VANISHING",
    "WIDTHS_ALLOWED",
    "Advice",
    "CannotDiagnose",
    "CoordCheck",
    "Diagnosis",
    "Edges",
    "Examination",
    "FixReport",
    "Input",
    "Judgement",
    "LayerCheck",
    "LayerDiagnosis",
    "ModelInputError",
    "ModelOutputError",
    "Remedied",
    "Remedy",
    "Role",
    "SlopeFit",
    "Stream",
    "Trend",
    "Trial",
    "advice_table",
    "advise",
    "check_cost",
    "check_widths",
    "checked",
    "coord_check",
    "coord_figure",
    "diagnose",
    "diagnosing",
    "diagnosis_figure",
    "diagnosis_tables",
    "examine",
    "fix",
    "fixing",
    "judge",
    "module_path",
    "named",
    "probe_settings",
    "remedy",
    "roles",
    "training_figure",
    "trial",
    "why_not",
]
