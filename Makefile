# Duplex-MPE harness. `make demo` and `make test` each do their own set-up first.
SHELL := /bin/bash
PY    := .venv/bin/python
PIP   := .venv/bin/pip
RUN   ?= demo
ARGS  ?=
STAMP := .venv/.setup-stamp
APT_PKGS := espeak-ng sox chromium

.PHONY: cue-demo model-smoke model-env weights help setup demo test test-fast lint bench status rerun-failed review-export review-import cue-review-export cue-review-import clean-runs images k8s-render corpus

help:  ## list targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# apt packages when missing, then a venv with the pinned requirements. Idempotent: the
# stamp is newer than the requirement files when nothing changed, so a second run is instant.
$(STAMP): requirements.txt requirements-dev.txt requirements-nodeps.txt pyproject.toml
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --disable-pip-version-check -r requirements-dev.txt
	$(PIP) install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt -e .
	@touch $(STAMP)

setup: $(STAMP)  ## install apt packages and the virtualenv (fast when done)

demo: setup  ## run the whole pipeline on the embedded default (RUN=demo)
	RAY_AUTH_MODE=disabled $(PY) -m jobs.pipeline run_id=$(RUN) $(ARGS)

# Duplex Cue (docs/cue.md): the generated cue corpus through the known-outcome baselines and a tiny
# teacher-forced Moshi on CPU (random weights); CUE_RUN names the run, ARGS adds overrides.
CUE_RUN ?= cue-demo
cue-demo: setup  ## Duplex Cue end to end: replay, yield_now, yield_on_cue, ignore and a tiny Moshi on CPU (CUE_RUN=..., ARGS=...)
	RAY_AUTH_MODE=disabled NO_TORCH_COMPILE=1 $(PY) -m jobs.cue run_id=$(CUE_RUN) \
	  'model=[replay,yield_now,yield_on_cue,ignore,moshi_tiny]' $(ARGS)

# The scene corpus alone (docs/formats.md): generate, validate, count; prints the stats' path.
# SEED: the generator's seed (default: the scenes config's); STRICT=1: hold MANIFEST to the content rules.
N_PAIRS ?= 2000
SCENES  ?= conf/scenes/paper.yaml
corpus: setup  ## generate + validate the paper-scale corpus, write corpus_stats.json (N_PAIRS=..., SEED=..., MANIFEST=..., STRICT=1)
	$(PY) -m harness.scenes.corpus --n-pairs $(N_PAIRS) --scenes $(SCENES) $(if $(SEED),--seed $(SEED)) \
	  $(if $(MANIFEST),--manifest $(MANIFEST)) $(if $(STRICT),--strict)

# TEST_WORKERS pytest-xdist processes (0: this one process), each running whole test files, in
# the order collected (so a module's fixtures, a Ray or a browser, start once; the long e2e files first).
# Not --dist loadgroup: pytest-xdist 3.8 sets its groups on a node id pytest 9 no longer reads.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: setup  ## run the test suite (tests/unit, contract, e2e, gpu) and print its 25 slowest steps (TEST_WORKERS=2)
	$(PYTEST) --durations=25

test-fast: setup  ## the in-process tests only: tests/unit and tests/contract, without slow ones (TEST_WORKERS=2)
	$(PYTEST) -m "not slow" tests/contract tests/unit

lint: setup  ## ruff
	.venv/bin/ruff check .

bench: setup  ## benchmarks (figures, not assertions)
	$(PY) bench/vad.py
	$(PY) bench/reduce.py
	$(PY) bench/cluster_sim.py

status: setup  ## shards complete/failed/missing, spend and cost to finish (RUN=..., ARGS="store=s3 ...")
	$(PY) -m jobs.status run_id=$(RUN) $(ARGS)

rerun-failed: setup  ## finish a run: only incomplete shards and later stages (RUN=..., ARGS=...)
	RAY_AUTH_MODE=disabled $(PY) -m jobs.rerun_failed run_id=$(RUN) $(ARGS)

# Human validation kit (docs/review.md). ARGS: the run's other overrides (e.g. ARGS="scenes=tiny").
review-export: setup  ## review page + CSV to fill in for a run (RUN=..., ARGS=...)
	$(PY) -m jobs.review run_id=$(RUN) review.action=export $(ARGS)

review-import: setup  ## import two filled CSVs (RUN=..., REVIEWS=a.csv,b.csv, ADJUDICATION=c.csv optional)
	$(PY) -m jobs.review run_id=$(RUN) review.action=import review.csv=[$(REVIEWS)] \
	  $(if $(ADJUDICATION),review.adjudication=$(ADJUDICATION)) $(ARGS)

# The Duplex Cue review kit (docs/cue.md, "Human review") on a jobs.cue run (CUE_RUN, default cue-demo).
cue-review-export: setup  ## cue review page + CSV to fill in for a cue run (CUE_RUN=cue-demo, ARGS=...)
	$(PY) -m jobs.review run_id=$(CUE_RUN) review.kind=cue review.action=export $(ARGS)

cue-review-import: setup  ## import two filled cue CSVs (CUE_RUN=cue-demo, REVIEWS=a.csv,b.csv, ADJUDICATION=c.csv optional)
	$(PY) -m jobs.review run_id=$(CUE_RUN) review.kind=cue review.action=import review.csv=[$(REVIEWS)] \
	  $(if $(ADJUDICATION),review.adjudication=$(ADJUDICATION)) $(ARGS)

# Container images and KubeRay manifests (docs/cluster.md). IMAGE_TAG defaults to the commit.
REGISTRY  ?=
IMAGE_TAG ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo dev)
# every images/<family>/Dockerfile but the base's: a new family is a new folder, never an edit here
IMAGE_FAMILIES := $(sort $(filter-out base,$(patsubst images/%/Dockerfile,%,$(wildcard images/*/Dockerfile))))
image = $(if $(REGISTRY),$(REGISTRY)/)duplex-mpe-$(1):$(IMAGE_TAG)

images:  ## build the images where a Docker engine runs (REGISTRY=..., IMAGE_TAG=..., PUSH=1 to push)
	@docker info >/dev/null 2>&1 || { echo "make images: no Docker engine here ('docker info' failed): nothing built; the tests lint the Dockerfiles instead" >&2; exit 1; }
	DOCKER_BUILDKIT=1 docker build -f images/base/Dockerfile --build-arg GIT_COMMIT=$$(git rev-parse HEAD) \
	  --build-arg IMAGE_REF=$(call image,base) -t $(call image,base) .
	@set -e; for f in $(IMAGE_FAMILIES); do \
	  echo "docker build images/$$f -> $(call image,$$f)"; \
	  pins=$$(if [ -f images/$$f/build-args ]; then sed -n 's/^\([A-Z_][A-Z0-9_]*=.*\)$$/--build-arg \1/p' images/$$f/build-args; fi); \
	  DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=$(call image,base) --build-arg IMAGE_REF=$(call image,$$f) \
	    $$pins -t $(call image,$$f) images/$$f; \
	done
	@if [ -n "$(PUSH)" ]; then set -e; for f in base $(IMAGE_FAMILIES); do docker push $(call image,$$f); done; fi

MODEL ?=
BUCKET ?= duplex-mpe
PREFIX ?= runs
ENDPOINT_URL ?=
REGION ?=
WORKERS ?= 1
k8s-render: setup  ## render the RayJob of MODEL (or STAGE=scenes|synth|score) for RUN (BUCKET PREFIX REGISTRY WORKERS ...; OUT=file)
	@$(PY) k8s/render.py --model "$(MODEL)" --stage "$(or $(STAGE),pipeline)" --run-id "$(RUN)" --bucket "$(BUCKET)" \
	  --prefix "$(PREFIX)" --endpoint-url "$(ENDPOINT_URL)" --region "$(REGION)" --registry "$(REGISTRY)" --tag "$(IMAGE_TAG)" \
	  --workers "$(WORKERS)" --node-selector "$(NODE_SELECTOR)" --tolerations "$(TOLERATIONS)" \
	  --service-account "$(or $(SERVICE_ACCOUNT),duplex-mpe)" --secret "$(or $(S3_SECRET),duplex-mpe-s3)" \
	  --llm-secret "$(or $(LLM_SECRET),duplex-mpe-llm)" \
	  --model-cache-pvc "$(MODEL_CACHE_PVC)" --args "$(ARGS)" --out "$(OUT)" $(if $(KUSTOMIZE),--kustomize "$(KUSTOMIZE)")

clean-runs:  ## delete every local run under runs/
	rm -rf runs

model-smoke: setup  ## an adapter end to end on a tiny random instance of its real upstream code (MODEL=..., SRC=<checkout>)
	@test -n "$(MODEL)" -a -n "$(SRC)" || { echo "usage: make model-smoke MODEL=<name> SRC=<upstream checkout at the pinned commit>" >&2; exit 2; }
	$(PY) -m harness.models.smoke --model $(MODEL) --src $(SRC)

# Weights (docs/models.md, "Weights"): the one command that downloads. Every repository MODEL reads, at the
# revisions its config pins, into the Hugging Face cache (HF_HOME / HF_HUB_CACHE), then verified; ARGS adds
# overrides (asr=qwen3 tts=qwen3 for their weights). HF_TOKEN from the environment for gated repositories.
weights: setup  ## fetch and verify a model's weights into the Hugging Face cache (MODEL=..., ARGS="asr=qwen3 ...")
	$(PY) -m jobs.weights 'model=[$(MODEL)]' $(ARGS)

# A model family's environment for real runs without its image (harness/models/model_env.py): .venv-<family>
# with images/<family>/requirements.txt and the upstream checkout at the pinned commit (SRC: your own checkout).
model-env: setup  ## a virtualenv to run MODEL outside its image: .venv-<family> (MODEL=..., SRC=<checkout> optional)
	@test -n "$(MODEL)" || { echo "usage: make model-env MODEL=<name> [SRC=<upstream checkout>]" >&2; exit 2; }
	$(PY) -m harness.models.model_env --model $(MODEL) $(if $(SRC),--src $(SRC))
