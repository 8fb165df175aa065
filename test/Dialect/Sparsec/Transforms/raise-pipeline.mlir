// The named pipeline replays what `sparsec import` runs after importing.
// RUN: sparsec-opt %s --sparsec-raise-pipeline | FileCheck %s
// RUN: sparsec-opt %s --sparsec-raise-pipeline="dims=n=2" | FileCheck %s --check-prefix=PIN

sparsec.global @w1 : tensor<8x32xf32> {source = "w1"}
sparsec.global @b1 : tensor<32xf32> {source = "b1"}
sparsec.global @w2 : tensor<32x8xf32> {source = "w2"}
// CHECK-LABEL: func.func @ffn
// CHECK: %[[UP:.*]] = sparsec.linear %arg0, %{{.*}}, %{{.*}} : tensor<?x8xf32>, tensor<8x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
// CHECK: %[[R:.*]] = sparsec.relu %[[UP]]
// CHECK: sparsec.linear %[[R]], %{{.*}} : tensor<?x32xf32>, tensor<32x8xf32> -> tensor<?x8xf32>
// PIN: func.func @ffn(%arg0: tensor<2x8xf32> {sparsec.dims = ["n", ""]}) -> tensor<2x8xf32>
func.func @ffn(%x: tensor<?x8xf32> {sparsec.dims = ["n", ""]}) -> tensor<?x8xf32> {
  %w1 = sparsec.weight @w1 : tensor<8x32xf32>
  %b1 = sparsec.weight @b1 : tensor<32xf32>
  %w2 = sparsec.weight @w2 : tensor<32x8xf32>
  %m = sparsec.matmul %x, %w1 : tensor<?x8xf32>, tensor<8x32xf32> -> tensor<?x32xf32>
  %a = sparsec.add %m, %b1 : tensor<?x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %c = sparsec.cast %a : tensor<?x32xf32> -> tensor<?x32xf32>
  %r = sparsec.relu %c : tensor<?x32xf32>
  %y = sparsec.matmul %r, %w2 : tensor<?x32xf32>, tensor<32x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
