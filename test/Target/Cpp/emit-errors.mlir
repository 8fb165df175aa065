// RUN: not sparsec-translate --sparsec-to-cpp %s -split-input-file 2>&1 | FileCheck %s

// CHECK: error: has no memory slot: run sparsec-plan-memory first
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sparsec.relu %x : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// CHECK: error: the x86 backend does not support 'sparsec.predict' yet
func.func @main(%x: tensor<1x8xf32>, %w1: tensor<8x2xf32>, %w2: tensor<2x16xf32>) -> tensor<1x16xi1> {
  %m = sparsec.predict %x, %w1, %w2 {threshold = 0.5 : f32, sparsec.slots = array<i64: 0>} : tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32> -> tensor<1x16xi1>
  return %m : tensor<1x16xi1>
}

// -----

// CHECK: error: expected exactly one function to emit, found 2
func.func @a() { return }
func.func @b() { return }
