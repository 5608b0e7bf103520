"""The inline SVG charts: well-formed XML, bars proportional to their value, stable bytes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from materialize.site.svg import Bar, Column, bar_chart, samples_chart

NS = "{http://www.w3.org/2000/svg}"


def test_bars_are_proportional_and_clamped() -> None:
    bars = [Bar("1", 0.25, "a"), Bar("2", 1.0, "b", "bar best"), Bar("3", 1.7, "c"), Bar("4", -0.2, "d")]
    svg = bar_chart(bars, y_label="P", x_label="position", threshold=0.95, threshold_label="0.95")
    root = ET.fromstring(svg)
    rects = root.findall(f"{NS}rect")
    heights = [float(r.get("height")) for r in rects]
    assert heights[1] == heights[2] > 0 and heights[3] == 0  # a posterior never draws outside 0..1
    assert abs(heights[0] - heights[1] / 4) < 0.2
    assert [r.get("class") for r in rects] == ["bar", "bar best", "bar", "bar"]
    assert [r.find(f"{NS}title").text for r in rects] == ["a", "b", "c", "d"]
    assert root.find(f"{NS}line[@class='threshold']") is not None
    assert svg == bar_chart(bars, y_label="P", x_label="position", threshold=0.95, threshold_label="0.95")


def test_samples_with_equal_values_and_escaped_labels() -> None:
    svg = samples_chart([Column("<0>", [5.0, 5.0]), Column("1", [5.0])], band=None, y_label="m & s",
                        x_label="position")
    root = ET.fromstring(svg)  # escaped: still XML
    assert len(root.findall(f"{NS}circle")) == 3
    assert {c.get("cy") for c in root.findall(f"{NS}circle")} == {"120"}  # a flat series sits mid-axis
    assert root.find(f"{NS}rect[@class='band']") is None
