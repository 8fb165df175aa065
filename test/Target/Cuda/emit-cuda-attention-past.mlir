// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cpp | FileCheck %s --check-prefix=X86

// A float32 input that only device attention ops read as their past keys
// or values (Shape reads its dims only) is marked in the description
// (IODesc::attentionPast): the CUDA attention also reads a float16 past, so
// `generate` may keep a device KV cache passed there in 16 bits. An input
// another op reads too (`pk2`, added to itself) is not marked, nor are the
// query, the new keys, or any input of an x86 model. (`pv2` is: `generate`
// narrows its caches only where every one is marked.)
func.func @main(%q: tensor<1x2x1x8xf32> {sparsec.name = "q"},
                %pk: tensor<1x2x?x8xf32> {sparsec.name = "past_key_values.0.key", sparsec.dims = ["batch", "heads", "past", "d"]},
                %pv: tensor<1x2x?x8xf32> {sparsec.name = "past_key_values.0.value", sparsec.dims = ["batch", "heads", "past", "d"]},
                %pk2: tensor<1x2x?x8xf32> {sparsec.name = "pk2", sparsec.dims = ["batch", "heads", "past", "d"]},
                %pv2: tensor<1x2x?x8xf32> {sparsec.name = "pv2", sparsec.dims = ["batch", "heads", "past", "d"]})
    -> (tensor<1x2x1x8xf32> {sparsec.name = "y"}, tensor<1x2x?x8xf32> {sparsec.name = "present.0.key"},
        tensor<1x2x?x8xf32> {sparsec.name = "present.0.value"}, tensor<4xi64> {sparsec.name = "shape"},
        tensor<1x2x1x8xf32> {sparsec.name = "y2"}, tensor<1x2x?x8xf32> {sparsec.name = "twice"}) {
  %s = sparsec.shape %pk : tensor<1x2x?x8xf32> -> tensor<4xi64>
  %a, %nk, %nv = sparsec.attention %q, %q, %q past(%pk, %pv) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 0.25 : f32} : (tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
  %b, %nk2, %nv2 = sparsec.attention %q, %q, %q past(%pk2, %pv2) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 0.25 : f32} : (tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
  %t = sparsec.add %pk2, %pk2 : tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x2x?x8xf32>
  return %a, %nk, %nv, %s, %b, %t : tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<4xi64>, tensor<1x2x1x8xf32>, tensor<1x2x?x8xf32>
}

// CHECK-LABEL: const IODesc kInputs[] = {
// CHECK-NEXT: {"q", DType::f32, 4, {1, 2, 1, 8}, {"", "", "", ""}, {1, 2, 1, 8}},
// CHECK-NEXT: {"past_key_values.0.key", DType::f32, 4, {1, 2, -1, 8}, {"batch", "heads", "past", "d"}, {1, 2, -1, 8}, false, 0, true},
// CHECK-NEXT: {"past_key_values.0.value", DType::f32, 4, {1, 2, -1, 8}, {"batch", "heads", "past", "d"}, {1, 2, -1, 8}, false, 0, true},
// CHECK-NEXT: {"pk2", DType::f32, 4, {1, 2, -1, 8}, {"batch", "heads", "past", "d"}, {1, 2, -1, 8}},
// CHECK-NEXT: {"pv2", DType::f32, 4, {1, 2, -1, 8}, {"batch", "heads", "past", "d"}, {1, 2, -1, 8}, false, 0, true},
// CHECK-NEXT: };
// CHECK-LABEL: const IODesc kOutputs[] = {
// CHECK-NOT: true
// CHECK: };

// X86-LABEL: const IODesc kInputs[] = {
// X86-NOT: true
// X86: };
