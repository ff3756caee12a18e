"""The HTML audit report: one self-contained file rendered from results JSON alone.

No training code is imported here (only `privbench.results` helpers, matplotlib and jinja2), so
`privbench report RESULTS.json` works from the JSON file alone. Plots are matplotlib PNGs and
reconstruction galleries are PNGs, both embedded as data URIs; CSS is inline; the template is
rendered by jinja2 with autoescaping, so every string from configs, names and paths is escaped.
"""

from privbench.report.render import merge_results, render_html, verdicts

__all__ = ["merge_results", "render_html", "verdicts"]
