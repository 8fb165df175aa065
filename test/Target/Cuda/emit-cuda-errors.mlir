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

// -----

// Device compares give device booleans, which `where` reads; logical ops
// on them would need the host.
// CHECK: error: the CUDA backend does not support 'sparsec.and' on device values yet
sparsec.global @w : tensor<4x4xf32> {source = "w"}
func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xi1> {
  %w = sparsec.weight @w : tensor<4x4xf32>
  %h = sparsec.linear %x, %w {sparsec.slots = array<i64: 0>} : tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>
  %one = sparsec.constant dense<1.0> : tensor<f32>
  %c = sparsec.compare gt, %h, %one {sparsec.slots = array<i64: 1>} : tensor<1x4xf32>, tensor<f32> -> tensor<1x4xi1>
  %d = sparsec.compare lt, %h, %one {sparsec.slots = array<i64: 2>} : tensor<1x4xf32>, tensor<f32> -> tensor<1x4xi1>
  %a = sparsec.and %c, %d {sparsec.slots = array<i64: 3>} : tensor<1x4xi1>, tensor<1x4xi1> -> tensor<1x4xi1>
  return %a : tensor<1x4xi1>
}

// -----

// The device reduction takes one block of adjacent axes.
// CHECK: error: the CUDA backend reduces over one block of adjacent axes, not the axes [0, 2] of 'tensor<2x3x4xf32>'
sparsec.global @w : tensor<4x4xf32> {source = "w"}
func.func @main(%x: tensor<2x3x4xf32>) -> tensor<3xf32> {
  %w = sparsec.weight @w : tensor<4x4xf32>
  %h = sparsec.linear %x, %w {sparsec.slots = array<i64: 0>} : tensor<2x3x4xf32>, tensor<4x4xf32> -> tensor<2x3x4xf32>
  %r = sparsec.reduce sum, %h {axes = array<i64: 0, 2>, keepdims = false, sparsec.slots = array<i64: 1>} : tensor<2x3x4xf32> -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

// A not of a device mask other than (gate == 0): here a predictor's.
// CHECK: error: the CUDA backend does not support 'sparsec.not' on device values yet
sparsec.global @w : tensor<4x4xf32> {source = "w"}
sparsec.global @p1 : tensor<4x2xf32> {source = "p1"}
sparsec.global @p2 : tensor<2x4xf32> {source = "p2"}
func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xi1> {
  %w = sparsec.weight @w : tensor<4x4xf32>
  %p1 = sparsec.weight @p1 : tensor<4x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x4xf32>
  %h = sparsec.linear %x, %w {sparsec.slots = array<i64: 0>} : tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>
  %m = sparsec.predict %h, %p1, %p2 {threshold = 0.5 : f32, sparsec.slots = array<i64: 1>} : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<1x4xi1>
  %n = sparsec.not %m {sparsec.slots = array<i64: 2>} : tensor<1x4xi1>
  return %n : tensor<1x4xi1>
}
