// RUN: sparsec-opt %s --sparsec-widen-half="all=1" | FileCheck %s

// Everything half becomes float32: inputs, results, constants, casts and
// weights, except a float16 weight only linears read (kept, read as it is);
// other weights are widened when packed (transform "widen", first).
// CHECK: sparsec.global @w : tensor<3x4xf16> {source = "w"}
// CHECK: sparsec.global @g : tensor<3xf32> {source = "g", transforms = ["widen", "transpose"]}
// CHECK: sparsec.global @bf : tensor<3x4xf32> {source = "bf", transforms = ["widen"]}
// CHECK-LABEL: func.func @model
// CHECK-SAME: (%arg0: tensor<2x4xf32>) -> tensor<2x3xf32>
// CHECK: %[[W:.*]] = sparsec.weight @w : tensor<3x4xf16>
// CHECK: sparsec.linear %arg0, %[[W]] {transpose_weight} : tensor<2x4xf32>, tensor<3x4xf16> -> tensor<2x3xf32>
// CHECK: sparsec.constant dense<5.000000e-01> : tensor<f32>
// CHECK: sparsec.weight @g : tensor<3xf32>
// CHECK: sparsec.weight @bf : tensor<3x4xf32>
// CHECK: return %{{.*}} : tensor<2x3xf32>
sparsec.global @w : tensor<3x4xf16> {source = "w"}
sparsec.global @g : tensor<3xf16> {source = "g", transforms = ["transpose"]}
sparsec.global @bf : tensor<3x4xbf16> {source = "bf"}
func.func @model(%x: tensor<2x4xf16>) -> tensor<2x3xf16> {
  %w = sparsec.weight @w : tensor<3x4xf16>
  %y = sparsec.linear %x, %w {transpose_weight} : tensor<2x4xf16>, tensor<3x4xf16> -> tensor<2x3xf16>
  %h = sparsec.constant dense<5.000000e-01> : tensor<f16>
  %s = sparsec.mul %y, %h : tensor<2x3xf16>, tensor<f16> -> tensor<2x3xf16>
  %g = sparsec.weight @g : tensor<3xf16>
  %t = sparsec.add %s, %g : tensor<2x3xf16>, tensor<3xf16> -> tensor<2x3xf16>
  %bfw = sparsec.weight @bf : tensor<3x4xbf16>
  %x2 = sparsec.cast %x : tensor<2x4xf16> -> tensor<2x4xbf16>
  %z = sparsec.linear %x2, %bfw {transpose_weight} : tensor<2x4xbf16>, tensor<3x4xbf16> -> tensor<2x3xbf16>
  %z16 = sparsec.cast %z : tensor<2x3xbf16> -> tensor<2x3xf16>
  %r = sparsec.add %t, %z16 : tensor<2x3xf16>, tensor<2x3xf16> -> tensor<2x3xf16>
  return %r : tensor<2x3xf16>
}

// A declaration's signature widens too.
// CHECK-LABEL: func.func private @ext(tensor<2xf32>) -> tensor<2xf32>
func.func private @ext(tensor<2xf16>) -> tensor<2xf16>
