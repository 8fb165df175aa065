// RUN: sparsec-opt %s --sparsec-weight-layout=sparse-weights=f16 | FileCheck %s
// RUN: not sparsec-opt %s --sparsec-weight-layout=sparse-weights=fp8 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: sparse-weights must be f32, f16 or bf16, got 'fp8'
// RUN: sparsec-opt %s "--sparsec-weight-layout=sparse-weights=bf16 dense-weights=bf16 dense-layout=nk" | FileCheck %s --check-prefix=BF16
// bfloat16 storage: the same weights as fp16, transform "bf16".
// BF16-DAG: sparsec.global @up.T.bf16 : tensor<16x8xbf16> {source = "up", transforms = ["transpose", "bf16"]}
// BF16-DAG: sparsec.global @down.bf16 : tensor<16x8xbf16> {source = "down", transforms = ["bf16"]}
// BF16-DAG: sparsec.global @dense.T.bf16 : tensor<8x8xbf16> {source = "dense", transforms = ["transpose", "bf16"]}
// BF16-DAG: sparsec.global @p1.bf16 : tensor<8x2xbf16>
// BF16-DAG: sparsec.global @p2.bf16 : tensor<2x16xbf16>
// BF16-DAG: sparsec.global @pb : tensor<16xf32>
// BF16: sparsec.predict %arg0, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x8xf32>, tensor<8x2xbf16>, tensor<2x16xbf16>, tensor<16xf32>) -> tensor<1x16xi1>
// RUN: sparsec-opt %s "--sparsec-weight-layout=dense-weights=f16" | FileCheck %s --check-prefix=DENSE
// RUN: not sparsec-opt %s --sparsec-weight-layout=dense-weights=int4 2>&1 | FileCheck %s --check-prefix=BADDENSE
// BADDENSE: error: dense-weights must be f32, f16 or bf16, got 'int4'
// dense-weights=f16 (CUDA): the dense linear's weight only.
// DENSE-DAG: sparsec.global @dense.f16 : tensor<8x8xf16> {source = "dense", transforms = ["f16"]}
// DENSE-DAG: sparsec.global @p1 : tensor<8x2xf32>
// DENSE-DAG: sparsec.global @down : tensor<16x8xf32>
// DENSE-LABEL: func.func @ffn
// DENSE: sparsec.linear %{{.*}}, %{{.*}} : tensor<1x8xf32>, tensor<8x8xf16> -> tensor<1x8xf32>
// RUN: sparsec-opt %s "--sparsec-weight-layout=dense-weights=f16 dense-layout=nk" | FileCheck %s --check-prefix=NK
// RUN: not sparsec-opt %s --sparsec-weight-layout=dense-layout=mn 2>&1 | FileCheck %s --check-prefix=BADLAYOUT
// BADLAYOUT: error: dense-layout must be kn or nk, got 'mn'
// dense-layout=nk (CUDA): the dense linear's weight becomes neuron-major
// (transposed, then fp16); the sparse ones keep their own layouts.
// NK-DAG: sparsec.global @dense.T.f16 : tensor<8x8xf16> {source = "dense", transforms = ["transpose", "f16"]}
// NK-DAG: sparsec.global @down : tensor<16x8xf32>
// NK-LABEL: func.func @ffn
// NK: sparsec.sparse_linear %{{.*}}, %{{.*}} {{.*}} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
// NK: sparsec.linear %{{.*}}, %{{.*}} {transpose_weight} : tensor<1x8xf32>, tensor<8x8xf16> -> tensor<1x8xf32>

// fp16-stored weights: sparse_linear and predict weights get the "f16"
// transform (after the layout transform); dense linears, biases and the
// predictor bias stay float32.
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
sparsec.global @dense : tensor<8x8xf32> {source = "dense"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
sparsec.global @pb : tensor<16xf32> {source = "", value = dense<0.0> : tensor<16xf32>}
// CHECK-DAG: sparsec.global @up.T.f16 : tensor<16x8xf16> {source = "up", transforms = ["transpose", "f16"]}
// CHECK-DAG: sparsec.global @down.f16 : tensor<16x8xf16> {source = "down", transforms = ["f16"]}
// CHECK-DAG: sparsec.global @dense : tensor<8x8xf32> {source = "dense"}
// CHECK-DAG: sparsec.global @p1.f16 : tensor<8x2xf16> {source = "", transforms = ["f16"], value = dense<1.000000e+00> : tensor<8x2xf32>}
// CHECK-DAG: sparsec.global @p2.f16 : tensor<2x16xf16>
// CHECK-DAG: sparsec.global @pb : tensor<16xf32>
// CHECK-LABEL: func.func @ffn
// CHECK: sparsec.predict %arg0, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x8xf32>, tensor<8x2xf16>, tensor<2x16xf16>, tensor<16xf32>) -> tensor<1x16xi1>
// CHECK: sparsec.sparse_linear %arg0, %{{.*}} active %{{.*}} {{.*}} : (tensor<1x8xf32>, tensor<16x8xf16>, tensor<1x16xi1>) -> tensor<1x16xf32>
// CHECK: sparsec.sparse_linear %{{.*}}, %{{.*}} {{.*}} : (tensor<1x16xf32>, tensor<16x8xf16>) -> tensor<1x8xf32>
// CHECK: sparsec.linear %{{.*}}, %{{.*}} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
func.func @ffn(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %pb = sparsec.weight @pb : tensor<16xf32>
  %m = sparsec.predict %x, %p1, %p2, %pb : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<1x16xi1>
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<1x8xf32>, tensor<8x16xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  %r = sparsec.relu %h : tensor<1x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  %wd = sparsec.weight @dense : tensor<8x8xf32>
  %z = sparsec.linear %y, %wd : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  return %z : tensor<1x8xf32>
}
