"""normlab.report: the doctor's HTML report shows the table the CLI prints, labels as badges,
and the figure that :func:`normlab.doctor.view.diagnosis_figure` describes."""

from __future__ import annotations

import base64
import io
import math
import re
from functools import cache
from html import unescape

import torch

import normlab
from normlab import doctor, plots, report, zoo
from normlab.doctor import view as dfig
from normlab.doctor.view import diagnosis_tables
from tests.calibration import ResidualMLP


@cache
def sigmoid_stack() -> doctor.Diagnosis:
    x = torch.randn(zoo.input_shape("vanishing-sigmoid", 32), generator=torch.Generator())
    return doctor.diagnose(zoo.build("vanishing-sigmoid"), x)


def cells(row: str, tag: str) -> list[str]:
    return [
        unescape(re.sub(r"<[^>]+>", " ", c)).strip()
        for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row)
    ]


def test_report_table_is_the_cli_table_with_label_badges() -> None:
    d = sigmoid_stack()
    page = report.html_report(d, title="stack")
    table = diagnosis_tables(d, "")[0]
    head, body = page.split("</thead>", 1)
    assert cells(head, "th") == [*table.columns, "why"]  # "grad ratio" among them
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body.split("</table>", 1)[0])
    assert [cells(row, "td") for row in rows] == [
        [*row[:-1], " ".join(layer.labels), "; ".join(layer.criteria())]
        for row, layer in zip(table.rows, d.layers, strict=True)
    ]
    assert page.count('<span class="label"') == sum(len(layer.labels) for layer in d.layers)
    assert "the gradient is vanishing on its way back" in page


@cache
def fixed_pair() -> tuple[doctor.Diagnosis, doctor.Diagnosis, doctor.FixReport]:
    net = zoo.build("dead-relu")
    x = torch.randn(zoo.input_shape("dead-relu", 32), generator=torch.Generator())
    before = doctor.diagnose(net, x)
    fix = doctor.fix(net, "lsuv", x, generator=torch.Generator().manual_seed(0))
    return before, doctor.diagnose(net, x), fix


def finite(values: list[float], floor: float = 0.0) -> list[float | None]:
    return [max(v, floor) if math.isfinite(v) else None for v in values]


def test_diagnosis_figure_describes_the_diagnosis() -> None:
    before, after, _ = fixed_pair()
    fig = dfig.diagnosis_figure(before, after, "after --fix lsuv")
    act, gain, rho, grad, frac = fig.panels  # no residual add: no stream panel
    assert fig.shared_x and fig.grid == (5, 1)
    measured, predicted = gain.series  # the weight layers' gain beside the variance argument's
    weighted = [(i, la) for i, la in enumerate(before.layers) if math.isfinite(la.predicted_gain)]
    assert list(measured.x) == list(predicted.x) == [float(i) for i, _ in weighted]
    assert list(predicted.y) == [la.predicted_gain for _, la in weighted]
    assert [ln.value for ln in gain.lines] == [1.0]
    for k, d in enumerate((before, after)):
        layers = d.layers
        assert list(act.series[k].y) == finite([la.scale for la in layers], dfig.FLOOR)
        assert list(grad.series[k].y) == finite([la.grad_std for la in layers], dfig.FLOOR)
        weighted = [
            (i, la.grad_ratio) for i, la in enumerate(layers) if math.isfinite(la.grad_ratio)
        ]
        assert list(rho.series[k].x) == [i for i, _ in weighted]  # only weight layers, joined
        assert list(rho.series[k].y) == [max(v, dfig.FLOOR) for _, v in weighted]
        dead, saturated = frac.series[2 * k : 2 * k + 2]
        assert list(dead.y) == finite([la.dead_frac for la in layers])
        assert dead.hollow == saturated.hollow == bool(k)  # the fixed model's bars hollow
    assert [s.name for s in act.series] == ["as given", "after --fix lsuv"]
    assert act.series[1].dash == "dash"
    assert [ln.value for ln in act.lines] == [doctor.VANISHING, doctor.EXPLODING]
    assert [ln.value for ln in rho.lines] == [doctor.GRAD_VANISHING, doctor.GRAD_EXPLODING]
    assert [(b.low, b.high) for b in rho.bands] == [
        (-math.inf, doctor.GRAD_VANISHING),
        (doctor.GRAD_EXPLODING, math.inf),
    ]
    assert act.x.tick_labels == tuple(doctor.module_path(la.name) for la in before.layers)


def test_the_stream_is_drawn_beside_its_prediction() -> None:
    torch.manual_seed(0)
    d = doctor.diagnose(zoo.build("pre-ln"), torch.randn(16, 16, 64))
    assert d.stream is not None and d.stream.placement == "pre"
    panel = dfig.diagnosis_figure(d).panels[2]
    measured, predicted = panel.series
    names = [la.name for la in d.layers]
    assert list(measured.x) == [float(names.index(r)) for r in d.stream.readers]
    assert list(measured.y) == d.stream.growth and list(predicted.y) == d.stream.predicted
    assert not d.stream.raw_end and panel.lines == ()  # into a final norm: growth is the design


def test_a_stream_read_raw_is_drawn_with_its_bound() -> None:
    torch.manual_seed(0)
    d = doctor.diagnose(ResidualMLP(blocks=16), torch.randn(64, 32))
    assert d.stream is not None and d.stream.raw_end
    panel = dfig.diagnosis_figure(d).panels[2]
    names = [la.name for la in d.layers]
    assert list(panel.series[0].x) == [float(names.index(r)) for r in d.stream.readers]
    assert [ln.value for ln in panel.lines] == [doctor.STREAM_GROWTH]


def test_report_image_is_the_rendered_description() -> None:
    d = sigmoid_stack()
    page = report.html_report(d, title="stack")
    (png,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    buf = io.BytesIO()
    plots.draw(dfig.diagnosis_figure(d)).savefig(buf, format="png", dpi=96)
    assert base64.b64decode(png) == buf.getvalue()
    many = dfig.diagnosis_figure(d).panels[0].x  # 40-odd layers: every other one named
    assert many.ticks is not None and 0 < len(many.ticks) <= dfig.MAX_LAYER_TICKS


def test_report_with_a_fix_shows_both_models() -> None:
    before, after, fix = fixed_pair()
    page = report.html_report(before, title="m", after=after, fix=fix)
    assert "The model as given" in page and "The model after --fix lsuv" in page
    assert page.count("<table>") == 2


def test_the_report_says_why_each_label_and_what_the_fix_measured() -> None:
    from normlab import doctor, zoo
    from normlab.report import html_report

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(zoo.input_shape("deep-batchnorm", 64), generator=g) for _ in range(2)]
    d = doctor.diagnose(zoo.build("deep-batchnorm"), xs, generator=g)
    page = html_report(d, title="deep")
    assert "along the depth trend" in page and "(sustained: labelled)" in page
    flagged = [la for la in d.layers if la.labels != ["ok"]]
    assert page.count('<tr class="flagged">') == len(flagged) > 0
    assert "<details>" not in page  # 91 layers: one table

    torch.manual_seed(0)
    long = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(120)])
    d = doctor.diagnose(long, torch.randn(32, 16))  # 120 layers: the flagged ones first
    page = html_report(d, title="long")
    shown = sum(la.labels != ["ok"] for la in d.layers)
    assert f"<summary>{len(d.layers) - shown} more layers, all ok</summary>" in page

    net, x = zoo.build("vanishing-sigmoid"), torch.randn(zoo.input_shape("vanishing-sigmoid", 64))
    g = torch.Generator().manual_seed(0)
    # the shortest trial: Xavier keeps sigmoid's vanishing gradient, so the re-diagnosis bars a
    # cure whatever the losses (test_calibration measures it at the defaults)
    exam = doctor.examine(net, x, fix="xavier", generator=g, trial_steps=10, seeds=2)
    assert exam.trial is not None and exam.trial.flagged == ["vanishing"]
    page = html_report(exam.before, title="sig", after=exam.after, fix=exam.fix, trial=exam.trial)
    assert "Training check:" in page and "not a cure, keep the model as built" in page
    assert "rho " in page and "&lt; 0.001" in page  # the rule that gave 'vanishing'


def test_a_watch_report_draws_the_update_ratio_over_depth_with_karpathy_s_line() -> None:
    """The watch's report holds two charts: over training, and over depth at the last record,
    where each weight layer's update:data ratio of that step is drawn beside the 1e-3 guide
    (its points the record's own ratios); a diagnosis without updates has no such panel."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 1),
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with normlab.watch(net, every=2) as w:
        for _ in range(5):
            opt.zero_grad()
            net(torch.randn(64, 8, generator=g)).pow(2).mean().backward()
            w.step()
            opt.step()
    last = w.records[-1]
    want = {la["name"]: la["update_ratio"] for la in last["layers"] if la["update_ratio"]}
    assert sorted(want) == ["0", "2", "4"] and all(0 < v < 1 for v in want.values())
    d = report.log_diagnosis(last)
    figure = dfig.diagnosis_figure(d, updates=want)
    (panel,) = [p for p in figure.panels if p.title.startswith("Update:data ratio")]
    assert [line.value for line in panel.lines] == [1e-3] and panel.y.scale == "log"
    index = {la.name: float(i) for i, la in enumerate(d.layers)}
    (series,) = panel.series
    assert list(series.x) == [index[n] for n in want] and list(series.y) == list(want.values())
    plain = dfig.diagnosis_figure(d)
    assert not any(p.title.startswith("Update") for p in plain.panels)
    assert len(plain.panels) == len(figure.panels) - 1
    page = report.log_report(list(w.records), title="relu")
    assert 'alt="statistics over training"' in page
    assert f'alt="statistics over depth at step {last["step"]}"' in page
