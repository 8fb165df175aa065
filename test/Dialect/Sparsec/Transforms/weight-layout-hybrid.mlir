// RUN: sparsec-opt %s "--sparsec-weight-layout=dense-weights=f16 dense-layout=nk" | FileCheck %s

// The hybrid target: a dense linear on the CPU (`sparsec.device = "cpu"`)
// keeps the x86 kernels' [K, N] layout but is stored as float16 too (the
// x86 kernels convert as they load); the GPU one becomes neuron-major fp16.
// CHECK-DAG: sparsec.global @cold.f16 : tensor<8x4xf16> {source = "cold", transforms = ["f16"]}
// CHECK-DAG: sparsec.global @hot.T.f16 : tensor<4x8xf16> {source = "hot", transforms = ["transpose", "f16"]}
// CHECK-LABEL: func.func @split
// CHECK: sparsec.linear %arg0, %{{.*}} {transpose_weight} : tensor<1x8xf32>, tensor<4x8xf16> -> tensor<1x4xf32>
// CHECK: sparsec.linear %arg0, %{{.*}} {sparsec.device = "cpu"} : tensor<1x8xf32>, tensor<8x4xf16> -> tensor<1x4xf32>
sparsec.global @hot : tensor<8x4xf32> {source = "hot"}
sparsec.global @cold : tensor<8x4xf32> {source = "cold"}
func.func @split(%x: tensor<1x8xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %wh = sparsec.weight @hot : tensor<8x4xf32>
  %wc = sparsec.weight @cold : tensor<8x4xf32>
  %h = sparsec.linear %x, %wh : tensor<1x8xf32>, tensor<8x4xf32> -> tensor<1x4xf32>
  %c = sparsec.linear %x, %wc {sparsec.device = "cpu"} : tensor<1x8xf32>, tensor<8x4xf32> -> tensor<1x4xf32>
  return %h, %c : tensor<1x4xf32>, tensor<1x4xf32>
}
