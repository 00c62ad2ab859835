#!/usr/bin/env bash
# Zero-shot and soft-prompt (80 steps) runs of one model on every packaged task, one after another.
# Finished runs are skipped and an interrupted tuning resumes, so this can be stopped and restarted.
#
#   benchmarks/run_suite.sh gemma-3-270m 50            # model, items per task
#   TASKS="boolq triviaqa" benchmarks/run_suite.sh gemma-3-270m 50
#
# Gemma-3-270M on 2 CPU cores: 20-40 min per multiple-choice or short-answer task (tuning dominates);
# GSM8K tuning 66 min (whole worked solutions as targets, 256 generated tokens per curve item);
# MATH-500 longer (targets up to 851 tokens, 512 generated), its zero-shot scoring alone 28 min.
set -uo pipefail
model=${1:?usage: run_suite.sh MODEL [LIMIT]}
limit=${2:-50}
tasks=${TASKS:-"mmlu arc_easy arc_challenge boolq triviaqa hellaswag squad gsm8k math500"}
cd "$(dirname "$0")/.."
for task in $tasks; do
  echo "=== $task ($(date +%T))"
  .venv/bin/softeval run --model "$model" --task "$task" --limit "$limit" --method zero-shot,soft-prompt --out runs \
    || echo "!! $task failed (exit $?); going on with the next task"
done
.venv/bin/softeval runs runs
