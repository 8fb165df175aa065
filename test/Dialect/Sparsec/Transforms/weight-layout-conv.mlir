// RUN: sparsec-opt %s "--sparsec-weight-layout=conv-weights=f16 dense-weights=f16" | FileCheck %s
// RUN: sparsec-opt %s "--sparsec-weight-layout=dense-weights=f16" 2>&1 | FileCheck %s --check-prefix=X86
// RUN: sparsec-opt %s | FileCheck %s --check-prefix=F32
// RUN: not sparsec-opt %s --sparsec-weight-layout=conv-weights=f8 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: conv-weights must be f32, f16 or bf16, got 'f8'
// RUN: sparsec-opt %s "--sparsec-weight-layout=conv-weights=bf16 dense-weights=bf16" | FileCheck %s --check-prefix=BF16
// RUN: sparsec-opt %s "--sparsec-weight-layout=dense-weights=bf16" 2>&1 | FileCheck %s --check-prefix=X86BF16

// conv-weights=f16 (the CUDA target with --weights f16): each convolution's
// weight gets the "f16" transform; its bias, the batch norm's parameters
// and the linear after it (dense-weights) follow their own options.
// CHECK-NOT: remark
// CHECK-DAG: sparsec.global @w.f16 : tensor<4x3x3x3xf16> {source = "w", transforms = ["f16"]}
// CHECK-DAG: sparsec.global @wd.f16 : tensor<4x1x3x3xf16> {source = "wd", transforms = ["f16"]}
// CHECK-DAG: sparsec.global @b : tensor<4xf32> {source = "b"}
// CHECK-DAG: sparsec.global @fc.f16 : tensor<4x2xf16> {source = "fc", transforms = ["f16"]}
// CHECK-LABEL: func.func @main
// CHECK: sparsec.conv %arg0, %{{.*}}, %{{.*}} {{.*}} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf16>, tensor<4xf32> -> tensor<1x4x8x8xf32>
// CHECK: sparsec.conv %{{.*}}, %{{.*}} {{.*}} : tensor<1x4x8x8xf32>, tensor<4x1x3x3xf16> -> tensor<1x4x8x8xf32>
// CHECK: sparsec.batch_norm %{{.*}} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
// CHECK: sparsec.linear %{{.*}}, %{{.*}} : tensor<1x4xf32>, tensor<4x2xf16> -> tensor<1x2xf32>

// The x86 and hybrid targets keep float32 convolutions and say so.
// X86: remark: fp16 weight storage (--weights f16) applies to linears on this target: the 2 convolutions keep float32 weights (the CUDA target stores them as fp16)
// X86-DAG: sparsec.global @w : tensor<4x3x3x3xf32> {source = "w"}
// X86-DAG: sparsec.global @fc.f16 : tensor<4x2xf16> {source = "fc", transforms = ["f16"]}
// X86: sparsec.conv %arg0, %{{.*}}, %{{.*}} {{.*}} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32> -> tensor<1x4x8x8xf32>

// conv-weights=bf16 (--weights bf16 on CUDA): the "bf16" transform.
// BF16-NOT: remark
// BF16-DAG: sparsec.global @w.bf16 : tensor<4x3x3x3xbf16> {source = "w", transforms = ["bf16"]}
// BF16-DAG: sparsec.global @wd.bf16 : tensor<4x1x3x3xbf16> {source = "wd", transforms = ["bf16"]}
// BF16-DAG: sparsec.global @b : tensor<4xf32> {source = "b"}
// BF16-DAG: sparsec.global @fc.bf16 : tensor<4x2xbf16> {source = "fc", transforms = ["bf16"]}
// BF16: sparsec.conv %arg0, %{{.*}}, %{{.*}} {{.*}} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xbf16>, tensor<4xf32> -> tensor<1x4x8x8xf32>
// BF16: sparsec.linear %{{.*}}, %{{.*}} : tensor<1x4xf32>, tensor<4x2xbf16> -> tensor<1x2xf32>
// X86BF16: remark: bf16 weight storage (--weights bf16) applies to linears on this target: the 2 convolutions keep float32 weights (the CUDA target stores them as bf16)
// X86BF16-DAG: sparsec.global @fc.bf16 : tensor<4x2xbf16> {source = "fc", transforms = ["bf16"]}

// By default nothing changes and nothing is said.
// F32-NOT: remark
// F32-NOT: f16
sparsec.global @w : tensor<4x3x3x3xf32> {source = "w"}
sparsec.global @b : tensor<4xf32> {source = "b"}
sparsec.global @wd : tensor<4x1x3x3xf32> {source = "wd"}
sparsec.global @s : tensor<4xf32> {source = "s"}
sparsec.global @fc : tensor<4x2xf32> {source = "fc"}
func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x2xf32> {
  %w = sparsec.weight @w : tensor<4x3x3x3xf32>
  %b = sparsec.weight @b : tensor<4xf32>
  %wd = sparsec.weight @wd : tensor<4x1x3x3xf32>
  %s = sparsec.weight @s : tensor<4xf32>
  %fc = sparsec.weight @fc : tensor<4x2xf32>
  %c = sparsec.conv %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32> -> tensor<1x4x8x8xf32>
  %d = sparsec.conv %c, %wd {dilations = array<i64: 1, 1>, group = 4 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<4x1x3x3xf32> -> tensor<1x4x8x8xf32>
  %n = sparsec.batch_norm %d, %s, %s, %s, %s : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %f = sparsec.reduce mean, %n {axes = array<i64: 2, 3>, keepdims = false} : tensor<1x4x8x8xf32> -> tensor<1x4xf32>
  %y = sparsec.linear %f, %fc : tensor<1x4xf32>, tensor<4x2xf32> -> tensor<1x2xf32>
  return %y : tensor<1x2xf32>
}
