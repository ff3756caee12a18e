"""The HTML audit report: one self-contained file rendered from results JSON alone.

No training code is imported here (only `privbench.results` helpers, matplotlib and jinja2), so
`privbench report RESULTS.json` works from the JSON file alone. Plots are matplotlib PNGs and
reconstruction galleries are PNGs, both embedded as data URIs; CSS is inline; the template is
rendered by jinja2 with autoescaping, so every string from configs, names and paths is escaped.

The page's names are loaded on first use, so that the gate (`privbench check`, which reads
`privbench.report.gate`) never imports matplotlib or scipy with the package. The verdicts are
`privbench.report.verdicts.verdicts` (the module's name is the package's attribute).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privbench.plugins import lazy_names

__all__ = ["merge_results", "render_html"]
__getattr__ = lazy_names(__name__, dict.fromkeys(__all__, "render"))


if TYPE_CHECKING:
    from privbench.report.render import merge_results, render_html
