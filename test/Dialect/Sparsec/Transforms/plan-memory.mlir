// RUN: sparsec-opt %s --sparsec-plan-memory | FileCheck %s

// Values whose live ranges do not overlap share a slot; a slot is never
// reused by the op that reads its last value.
// CHECK: module attributes {sparsec.slot_bytes = array<i64: -1, 128, 128>}
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<4x8xf32>, %d: tensor<?x8xf32>) -> (tensor<4x8xf32>, tensor<?x8xf32>) {
  // CHECK: sparsec.relu %arg0 {sparsec.slots = array<i64: 0>}
  %0 = sparsec.relu %x : tensor<4x8xf32>
  // CHECK: sparsec.neg %{{.*}} {sparsec.slots = array<i64: 1>}
  %1 = sparsec.neg %0 : tensor<4x8xf32>
  // %0 is still live (read by the add): a third slot.
  // CHECK: sparsec.exp %{{.*}} {sparsec.slots = array<i64: 2>}
  %2 = sparsec.exp %1 : tensor<4x8xf32>
  // %1 died at the exp: its slot is reused. Function results stay live to
  // the end.
  // CHECK: sparsec.add %{{.*}}, %{{.*}} {sparsec.slots = array<i64: 1>}
  %3 = sparsec.add %2, %0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // %0 died at the add; a dynamic value takes its slot, which is then sized
  // at run time.
  // CHECK: sparsec.relu %arg1 {sparsec.slots = array<i64: 0>}
  %4 = sparsec.relu %d : tensor<?x8xf32>
  return %3, %4 : tensor<4x8xf32>, tensor<?x8xf32>
}
