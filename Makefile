# sparsec top-level entry points.
#   make demo   install what is missing, build, import the bundled model
#   make check  install what is missing, build, run every test
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MODELS ?= $(abspath ../shared/models)
LLVM_DIR := /usr/lib/llvm-22

CMAKE_FLAGS = -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=$(LLVM_DIR)/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=$(LLVM_DIR)/bin/lit \
  -DSPARSEC_MODELS_DIR=$(MODELS) \
  -DPython3_EXECUTABLE=$(shell command -v python3)

.PHONY: all deps configure build check demo clean docs

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	ninja -C $(BUILD_DIR) -j $(JOBS)

check: build
	@scripts/run-tests.sh $(BUILD_DIR)

docs: configure
	ninja -C $(BUILD_DIR) sparsec-doc

demo: build
	@scripts/demo.sh $(BUILD_DIR) $(MODELS)

clean:
	rm -rf $(BUILD_DIR)
