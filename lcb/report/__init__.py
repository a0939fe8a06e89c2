"""`lcb report` and `lcb compare`: a static view of runs, scored files and optimizer grids.

The package reads what lcb already wrote and writes plain files: `collect` finds and loads the
sources; `metrics`, `flips` and `grid` compute every number shown and `aggregates` gathers them
into `report.json`; `plots` draws inline SVG; `pages` writes the HTML from the jinja2 templates
in `templates/` (loaded by `assets`), with `problems` preparing each problem's page;
`tables` writes the paper tables; `compare` prints a flip table in the terminal. Nothing here
fetches, serves or runs model code, and model-written text is escaped wherever it is shown.
"""
