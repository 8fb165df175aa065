// RUN: sparsec-opt %s --sparsec-fuse-gelu | FileCheck %s

// CHECK-LABEL: func.func @pytorch_order
// CHECK-NEXT: %[[G:.*]] = sparsec.gelu %arg0 : tensor<4x32xf32>
// CHECK-NEXT: return %[[G]]
func.func @pytorch_order(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %sqrt2 = sparsec.constant dense<1.41421354> : tensor<f32>
  %one = sparsec.constant dense<1.0> : tensor<f32>
  %half = sparsec.constant dense<0.5> : tensor<f32>
  %d = sparsec.div %x, %sqrt2 : tensor<4x32xf32>, tensor<f32> -> tensor<4x32xf32>
  %e = sparsec.erf %d : tensor<4x32xf32>
  %a = sparsec.add %e, %one : tensor<4x32xf32>, tensor<f32> -> tensor<4x32xf32>
  %m = sparsec.mul %x, %a : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  %y = sparsec.mul %m, %half : tensor<4x32xf32>, tensor<f32> -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// CHECK-LABEL: func.func @half_first
// CHECK: sparsec.gelu %arg0
// CHECK-NOT: sparsec.erf
func.func @half_first(%x: tensor<8xf32>) -> tensor<8xf32> {
  %rsqrt2 = sparsec.constant dense<0.707106769> : tensor<f32>
  %one = sparsec.constant dense<1.0> : tensor<f32>
  %half = sparsec.constant dense<0.5> : tensor<f32>
  %h = sparsec.mul %x, %half : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %d = sparsec.mul %x, %rsqrt2 : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %e = sparsec.erf %d : tensor<8xf32>
  %a = sparsec.add %one, %e : tensor<f32>, tensor<8xf32> -> tensor<8xf32>
  %y = sparsec.mul %h, %a : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// The erf argument is not x / sqrt(2): leave it alone.
// CHECK-LABEL: func.func @wrong_constant
// CHECK-NOT: sparsec.gelu
func.func @wrong_constant(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c = sparsec.constant dense<3.0> : tensor<f32>
  %one = sparsec.constant dense<1.0> : tensor<f32>
  %half = sparsec.constant dense<0.5> : tensor<f32>
  %d = sparsec.div %x, %c : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %e = sparsec.erf %d : tensor<8xf32>
  %a = sparsec.add %e, %one : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %m = sparsec.mul %x, %a : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %y = sparsec.mul %m, %half : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}
