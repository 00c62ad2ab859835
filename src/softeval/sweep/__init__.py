"""Many runs: the sweep file and its entries (models x tasks x methods x seeds, each job exactly a
`softeval run`), checkpoint series, the Ray driver and its per-model workers, and the live view.
Orchestrates runs and analysis; knows nothing of how a run is scored. Imports run, analysis, store,
lm, tasks and the leaves."""
