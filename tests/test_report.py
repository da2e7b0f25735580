"""normlab.report: the doctor's HTML report shows the table the CLI prints, labels as badges."""

from __future__ import annotations

import re
from functools import cache
from html import unescape

import torch

from normlab import doctor, report, zoo
from normlab.experiments.doctor import diagnosis_tables


@cache
def sigmoid_stack() -> doctor.Diagnosis:
    x = torch.randn(zoo.input_shape("vanishing-sigmoid", 32), generator=torch.Generator())
    return doctor.diagnose(zoo.build("vanishing-sigmoid"), x)


def cells(row: str, tag: str) -> list[str]:
    return [
        unescape(re.sub(r"<[^>]+>", " ", c)).strip()
        for c in re.findall(rf"<{tag}>(.*?)</{tag}>", row)
    ]


def test_report_table_is_the_cli_table_with_label_badges() -> None:
    d = sigmoid_stack()
    page = report.html_report(d, title="stack")
    table = diagnosis_tables(d, "")[0]
    head, body = page.split("</thead>", 1)
    assert cells(head, "th") == list(table.columns)  # "grad ratio" among them
    rows = re.findall(r"<tr>(.*?)</tr>", body.split("</table>", 1)[0])
    assert [cells(row, "td") for row in rows] == [
        [*row[:-1], " ".join(layer.labels)] for row, layer in zip(table.rows, d.layers, strict=True)
    ]
    assert page.count('<span class="label"') == sum(len(layer.labels) for layer in d.layers)
    assert "the gradient is vanishing on its way back" in page
