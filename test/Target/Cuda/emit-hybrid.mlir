// RUN: sparsec-opt %s --sparsec-schedule-pipeline=hybrid=true | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A hybrid FFN (as sparsec-split-hot-cold leaves it): the FFN input's copy
// to the host starts right after its producer, before the GPU part is
// queued; the CPU part waits for it, reads its weights through host views
// of the pack and runs the x86 ops; its result is uploaded for the sum.
sparsec.global @ln : tensor<4xf32> {source = "ln"}
sparsec.global @wg : tensor<4x3xf32> {source = "wg"}
sparsec.global @dg : tensor<3x4xf32> {source = "dg"}
sparsec.global @wc : tensor<4x5xf32> {source = "wc"}
sparsec.global @dc : tensor<5x4xf32> {source = "dc"}
func.func @main(%x: tensor<?x4xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x4xf32> {sparsec.name = "y"}) {
  %ln = sparsec.weight @ln : tensor<4xf32>
  %n = sparsec.layer_norm %x, %ln : tensor<?x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
  %wg = sparsec.weight @wg : tensor<4x3xf32>
  %hg = sparsec.linear %n, %wg : tensor<?x4xf32>, tensor<4x3xf32> -> tensor<?x3xf32>
  %rg = sparsec.relu %hg : tensor<?x3xf32>
  %dg = sparsec.weight @dg : tensor<3x4xf32>
  %yg = sparsec.linear %rg, %dg : tensor<?x3xf32>, tensor<3x4xf32> -> tensor<?x4xf32>
  %wc = sparsec.weight @wc : tensor<4x5xf32>
  %hc = sparsec.linear %n, %wc {sparsec.device = "cpu"} : tensor<?x4xf32>, tensor<4x5xf32> -> tensor<?x5xf32>
  %rc = sparsec.relu %hc {sparsec.device = "cpu"} : tensor<?x5xf32>
  %dc = sparsec.weight @dc : tensor<5x4xf32>
  %yc = sparsec.linear %rc, %dc {sparsec.device = "cpu"} : tensor<?x5xf32>, tensor<5x4xf32> -> tensor<?x4xf32>
  %y = sparsec.add %yg, %yc : tensor<?x4xf32>, tensor<?x4xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: if (!cuda::layerNorm(ctx, {{u[0-9]+}}, {{v[0-9]+}}, nullptr, -1, {{.*}}, {{[0-9]+}}, [[N:v[0-9]+]])) return false;
// CHECK-NEXT: Tensor [[H:h[0-9]+]];
// CHECK-NEXT: if (!cuda::toHost(ctx, [[N]], 0, [[H]])) return false;
// CHECK: if (!cuda::linear(ctx, [[N]], {{v[0-9]+}}, nullptr, ops::Activation::relu,
// CHECK: if (!cuda::linear(ctx,
// CHECK: const Tensor [[WC:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f32, 2,
// CHECK: if (!cuda::waitHost(ctx, 0)) return false;
// CHECK-NEXT: Tensor [[HC:v[0-9]+]];
// CHECK-NEXT: if (!ops::linear(ctx, [[H]], [[WC]], nullptr, ops::Activation::relu, {{[0-9]+}}, [[HC]])) return false;
// CHECK: const Tensor [[DC:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f32, 2,
// CHECK: if (!ops::linear(ctx, [[HC]], [[DC]], nullptr, ops::Activation::none, {{[0-9]+}}, [[YC:v[0-9]+]])) return false;
// CHECK: if (!cuda::upload(ctx, [[YC]], {{[0-9]+}}, [[U:u[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::add, {{v[0-9]+}}, [[U]],

// With the CUDA target's neuron-major layout only the GPU part's weights
// are transposed: the CPU part keeps the x86 kernels' [K, N].
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=hybrid=true dense-layout=nk" | FileCheck %s --check-prefix=NK
// NK-DAG: sparsec.global @wg.T : tensor<3x4xf32> {source = "wg", transforms = ["transpose"]}
// NK-DAG: sparsec.global @wc : tensor<4x5xf32> {source = "wc"}
// NK-DAG: sparsec.global @dc : tensor<5x4xf32> {source = "dc"}
// NK: sparsec.linear {{.*}}transpose_weight} : tensor<?x4xf32>, tensor<3x4xf32> -> tensor<?x3xf32>
// NK: sparsec.linear {{.*}}sparsec.device = "cpu"{{.*}} : tensor<?x4xf32>, tensor<4x5xf32> -> tensor<?x5xf32>
