"""One job, one model on one task: the run options (RunConfig and the one option table every front
end reads), the pipeline that scores each method into its run folder, soft-prompt tuning, prompt
assembly and per-item scoring. Imports store, lm, tasks and the leaves."""
