// RUN: not sparsec-translate --sparsec-to-cuda %s -split-input-file 2>&1 | FileCheck %s

// Profiling counts on the host CPU kernels only.
// CHECK: error: profiling builds target x86 (compile the profiling binary with --target x86)
sparsec.global @w : tensor<4x4xf32> {source = "w"}
func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %w = sparsec.weight @w : tensor<4x4xf32>
  %h = sparsec.linear %x, %w {sparsec.slots = array<i64: 0>} : tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>
  sparsec.profile_count %h {index = 0 : i64, site = "s"} : tensor<1x4xf32>
  return %h : tensor<1x4xf32>
}

// -----

// An op with no device kernel on a device value names the op.
// CHECK: error: the CUDA backend does not support 'sparsec.cast' on device values yet
sparsec.global @w : tensor<4x4xf32> {source = "w"}
func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xi64> {
  %w = sparsec.weight @w : tensor<4x4xf32>
  %h = sparsec.linear %x, %w {sparsec.slots = array<i64: 0>} : tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>
  %c = sparsec.cast %h {sparsec.slots = array<i64: 1>} : tensor<1x4xf32> -> tensor<1x4xi64>
  return %c : tensor<1x4xi64>
}

// -----

// Embedding ids computed on the device cannot be checked on the host.
// CHECK: error: the CUDA backend needs embedding ids on the host, but it is computed on the device
sparsec.global @t : tensor<8x4xf32> {source = "t"}
sparsec.global @ids : tensor<2xi64> {source = "ids"}
func.func @main() -> tensor<2x4xf32> {
  %t = sparsec.weight @t : tensor<8x4xf32>
  %ids = sparsec.weight @ids : tensor<2xi64>
  %e = sparsec.embedding %t, %ids {sparsec.slots = array<i64: 0>} : tensor<8x4xf32>, tensor<2xi64> -> tensor<2x4xf32>
  return %e : tensor<2x4xf32>
}
