"""Reporters: turn a run and its analysis into HTML, Markdown, JSON and A/B comparisons.

One module per output (`html`, `markdown`, `jsonreport`, `compare`), each a
pure function of (run, analysis); `context.build_context` chooses and words
what they show; `plots` draws the figures. Reporters format, they never
compute statistics (docs/reports.md). Only this package imports matplotlib
and Jinja2, and only when a reporter module is imported.
"""
