"""`lcb report` and `lcb compare`: a static view of runs, scored files and optimizer grids.

The package reads what lcb already wrote and writes plain files: `collect` finds and loads the
sources; `metrics`, `flips` and `grid` compute every number shown and `aggregates` gathers them
into `report.json`; `plots` draws inline SVG; `pages` writes the HTML from the templates in
`templates`, `index_page` and `detail_pages`, with `problems` preparing each problem's page;
`tables` writes the paper tables; `compare` prints a flip table in the terminal. Nothing here
fetches, serves or runs model code, and model-written text is escaped wherever it is shown.
"""
