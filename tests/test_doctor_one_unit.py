"""A layer of one output unit is measured as its anchor is (normlab.doctor.layers._one_unit_scales):
the std over every element of one unit holds only its spread between examples, so a readout of a
learned query (nearly the same for every input) reads small whatever its init, while real
vanishing, before the head or in it, stays flagged."""

from __future__ import annotations

import torch
from torch import nn

from normlab import doctor
from normlab.doctor.constants import VANISHING

WIDTH = 64


class QueryHead(nn.Module):
    """A learned token plus ``mix`` times a projection of the input, a LayerNorm, and a
    64 -> 64 -> 64 -> ``out`` ReLU MLP at torch's default init (a DETR-style presence head)."""

    def __init__(self, mix: float = 0.05, out: int = 1) -> None:
        super().__init__()
        self.token = nn.Parameter(torch.randn(WIDTH))
        self.read_in = nn.Linear(WIDTH, WIDTH)
        self.mix = mix
        self.norm = nn.LayerNorm(WIDTH)
        self.l1, self.l2 = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
        self.l3 = nn.Linear(WIDTH, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.token + self.mix * self.read_in(x))  # (N, WIDTH)
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(h)))))  # (N, out)


def _head(mix: float = 0.05, out: int = 1, std: float | None = None) -> QueryHead:
    """Seed 0; ``std``: the MLP's weights drawn N(0, std^2), its biases 0, instead of torch's
    default."""
    torch.manual_seed(0)
    m = QueryHead(mix, out)
    if std is not None:
        for layer in (m.l1, m.l2, m.l3):
            nn.init.normal_(layer.weight, 0.0, std)
            nn.init.zeros_(layer.bias)
    return m


def _relu_stack(std: float, depth: int = 6) -> nn.Sequential:
    """``depth`` Linear(64, 64) + ReLU layers and a Linear(64, 1) head, weights N(0, std^2),
    biases 0."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    layers.append(nn.Linear(WIDTH, 1))
    net = nn.Sequential(*layers)
    for m in net:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            nn.init.zeros_(m.bias)
    return net


def _diagnose(model: nn.Module) -> doctor.Diagnosis:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(64, WIDTH, generator=g) for _ in range(2)]  # (64, 64) each
    return doctor.diagnose(model, xs, generator=torch.Generator().manual_seed(0))


def _layer(d: doctor.Diagnosis, name: str) -> doctor.LayerDiagnosis:
    return next(la for la in d.layers if la.name == name)


def test_a_one_unit_readout_of_a_learned_query_is_healthy() -> None:
    """Its std over every element is under the bound (the query varies ~0.05 between inputs),
    yet its scale, measured as q, is a one-draw estimate of what the same head with 8 units
    measures as its std: the variance argument predicts sqrt(1/3) per default-init layer and
    1/sqrt(2) per ReLU, 0.096 at l3; one unit's q is a chi^2(1) draw around it and 8 units'
    a chi^2(8)/8 one, so they agree within 2x (about 3 of the latter's standard deviations
    of sqrt(q), 1/sqrt(2 * 8) ~ 0.25 relative)."""
    one, eight = _diagnose(_head(out=1)), _diagnose(_head(out=8))
    l3, l3_eight = _layer(one, "l3"), _layer(eight, "l3")
    assert l3.act_std / _layer(one, "norm").act_std < VANISHING  # the std alone would alarm
    assert one.problems == [] and eight.problems == []
    assert 0.5 < l3.scale / l3_eight.scale < 2.0


def test_a_one_unit_readout_of_an_input_dependent_token_is_healthy() -> None:
    d = _diagnose(_head(mix=1.0))
    assert d.problems == []
    assert _layer(d, "l3").scale > 0.03  # ~0.096 predicted (above): within 3x


def test_a_relu_stack_at_std_001_ending_in_one_unit_stays_vanishing() -> None:
    """Each layer's gain is 0.01 * sqrt(64) / sqrt(2) = 0.057: the head is ~0.057**7 ~ 2e-9
    of the input, the stack under the bound from its second layer."""
    d = _diagnose(_relu_stack(0.01))
    assert "vanishing" in d.problems
    head = _layer(d, "12")
    assert "vanishing" in head.labels and head.scale < 1e-6


def test_a_he_relu_stack_ending_in_one_unit_is_healthy() -> None:
    """The twin at He's std sqrt(2/64) keeps the scale: the head's q is ~1x the input's."""
    d = _diagnose(_relu_stack((2 / WIDTH) ** 0.5))
    assert d.problems == []
    # 1 predicted; each of 7 layers moves the RMS by ~sqrt(1/64) = 12.5% (half of q's
    # sqrt(2/32), 32 live ReLU units), 33% together: 3x either way is ~3.3 of those
    assert 0.3 < _layer(d, "12").scale < 3.0


def test_a_learned_query_whose_stack_vanishes_stays_flagged() -> None:
    """The query head's MLP at std 0.001, biases 0: 0.001 * sqrt(64) = 0.008 per layer and
    1/sqrt(2) per ReLU, under the bound at l1 already, 0.008**3 / 2 ~ 2.6e-7 at the one-unit
    l3 (asserted under 1e-5: q reads the row's norm, whose square, a sum of 64 draws, is
    within ~50% of its mean at 3 standard deviations)."""
    d = _diagnose(_head(std=0.001))
    assert "vanishing" in d.problems
    assert "vanishing" in _layer(d, "l1").labels
    assert "vanishing" in _layer(d, "l3").labels and _layer(d, "l3").scale < 1e-5


def test_a_one_unit_head_of_tiny_weights_on_a_healthy_query_is_flagged() -> None:
    """Only the head is shrunk (std 1e-5: sqrt(64) * 1e-5 * 0.17 ~ 1.4e-5 of the norm): the rule
    reads its weights, so a small row is not hidden by the input's scale."""
    m = _head()
    nn.init.normal_(m.l3.weight, 0.0, 1e-5)
    d = _diagnose(m)
    assert "vanishing" in _layer(d, "l3").labels
