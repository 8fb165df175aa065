#!/usr/bin/env bash
# Installs what sparsec needs to build and test on Debian 12, skipping what is
# already there; arguments name more apt packages to install with them.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build python3 python3-pip
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22
  libzstd-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libgtest-dev libopenblas-dev
)
# Extra apt packages a script needs beyond these (fuzz-importer.sh: the
# sanitizer runtimes) are given as arguments.
APT_PACKAGES+=("$@")
# package:module-to-import (Debian has an empty `onnx` namespace directory,
# so check a real submodule).
PIP_PACKAGES=(numpy:numpy onnx:onnx.helper onnxruntime:onnxruntime)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] apt: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[install-deps] apt packages present"
fi

PY=${PYTHON:-python3}
pip_missing=()
for entry in "${PIP_PACKAGES[@]}"; do
  "$PY" -c "import ${entry#*:}" 2>/dev/null || pip_missing+=("${entry%%:*}")
done
if [ ${#pip_missing[@]} -gt 0 ]; then
  echo "[install-deps] pip: ${pip_missing[*]}"
  "$PY" -m pip install -q "${pip_missing[@]}" 2>/dev/null ||
    "$PY" -m pip install -q --break-system-packages "${pip_missing[@]}"
else
  echo "[install-deps] python packages present"
fi
